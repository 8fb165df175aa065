# -*- Python -*-
import os
import subprocess

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "SPARSEC"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.sparsec_obj_root, "test")
config.excludes = ["Inputs", "CMakeLists.txt", "README.md", "lit.cfg.py",
                   "lit.site.cfg.py", "unit"]

config.environment["FILECHECK_OPTS"] = "-enable-var-scope"
llvm_config.use_default_substitutions()

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%models", config.sparsec_models_dir))
config.substitutions.append(
    ("%gen_onnx", "%s %s" % (config.python_executable,
                             os.path.join(config.test_source_root, "Frontend",
                                          "ONNX", "gen_onnx_models.py"))))

# Only the -22 tool directory has the matching FileCheck/not.
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.sparsec_tools_dir, append_path=True)
tool_dirs = [config.sparsec_tools_dir, config.llvm_tools_dir]
llvm_config.add_tool_substitutions(["sparsec", "sparsec-opt", "sparsec-translate",
                                    "sparsec-unittests", "sparsec-cuda-sparse-test",
                                    "sparsec-cuda-dense-test",
                                    "sparsec-cuda-pit-test"],
                                   tool_dirs)

# Tests that read ../shared/models need it present.
if os.path.isdir(config.sparsec_models_dir):
    config.available_features.add("models")

# Tests that generate ONNX files need the onnx Python package.
def python_runs(code):
    """Whether the test Python runs `code` (e.g. an import) without error."""
    try:
        subprocess.check_call([config.python_executable, "-c", code],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return True
    except Exception:
        return False


# Debian ships an empty `onnx` namespace directory; check a real module.
if python_runs("from onnx import helper, TensorProto"):
    config.available_features.add("onnx-python")

# GPU tests need the CUDA test binaries (built where nvcc is) and a GPU.
if os.path.exists(os.path.join(config.sparsec_tools_dir, "sparsec-cuda-sparse-test")):
    config.available_features.add("cuda-compiler")
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                             timeout=20)
        if out.returncode == 0 and "GPU" in out.stdout:
            config.available_features.add("cuda-device")
    except Exception:
        pass

# Tests that generate inputs with numpy.
if python_runs("import numpy"):
    config.available_features.add("numpy")

if os.path.isdir("/usr/share/libonnx-testdata/data/node"):
    config.available_features.add("onnx-testdata")
config.substitutions.append(
    ("%node_tests", "%s %s --sparsec %s" % (
        config.python_executable,
        os.path.join(config.test_source_root, "..", "scripts",
                     "onnx_node_tests.py"),
        os.path.join(config.sparsec_tools_dir, "sparsec"))))

config.substitutions.append(("%pyexe", config.python_executable))
config.substitutions.append(
    ("%head_sparsity", "%s %s" % (
        config.python_executable,
        os.path.join(config.test_source_root, "..", "scripts",
                     "head_sparsity.py"))))
config.substitutions.append(
    ("%lookahead", "%s %s" % (
        config.python_executable,
        os.path.join(config.test_source_root, "..", "scripts",
                     "lookahead_predictability.py"))))
config.substitutions.append(
    ("%e2e", "%s %s --sparsec %s" % (
        config.python_executable,
        os.path.join(config.test_source_root, "..", "scripts", "e2e_check.py"),
        os.path.join(config.sparsec_tools_dir, "sparsec"))))
if python_runs("import onnxruntime"):
    config.available_features.add("onnxruntime")

if os.path.exists(os.path.join(config.sparsec_tools_dir, "sparsec-unittests")):
    config.available_features.add("unittests")
