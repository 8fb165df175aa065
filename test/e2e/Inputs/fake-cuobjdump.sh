#!/bin/sh
# A stand-in for cuobjdump for test/e2e/sass-script.test: canned -sass and
# -res-usage output for two kernels (shapes as cuobjdump 13 prints them).
case "$1" in
-sass)
  cat <<'SASS'
	code for sm_90a
		Function : _Z7kernelAPf
	.headerflags	@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                      /* 0x00000a00ff017b82 */
                                                                                 /* 0x000fe40000000800 */
        /*0010*/                   S2R R0, SR_TID.X ;                          /* 0x0000000000007919 */
                                                                                 /* 0x000e220000002100 */
        /*0020*/                   EXIT ;                                      /* 0x000000000000794d */
                                                                                 /* 0x000fea0003800000 */
		..........
		Function : _Z7kernelBPi
	.headerflags	@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   HGMMA.64x32x16.F32 R24, gdesc[UR8].tnspA.tnspB, R24 ; /* 0x60600000081879f0 */
                                                                                 /* 0x000fe40000000800 */
        /*0010*/                   EXIT ;                                      /* 0x000000000000794d */
                                                                                 /* 0x000fea0003800000 */
		..........
SASS
  ;;
-res-usage)
  cat <<'RES'
Resource usage:
 Common:
  GLOBAL:0
 Function _Z7kernelAPf:
  REG:12 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:904 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function _Z7kernelBPi:
  REG:60 STACK:16 SHARED:1024 LOCAL:16 CONSTANT[0]:960 TEXTURE:0 SURFACE:0 SAMPLER:0
RES
  ;;
*)
  echo "fake cuobjdump: unexpected arguments: $*" >&2
  exit 1
  ;;
esac
