//===- kernel_trace.cpp - GPU activity timeline of a process (CUPTI) ------===//
//
// Part of the sparsec project.
//
// A preload library: LD_PRELOAD=libsparsec_kernel_trace.so PROGRAM ...
// records every kernel, memcpy and memset the process runs on the GPU,
// including the nodes of replayed CUDA graphs, with CUPTI's activity API,
// and writes them when the process exits to $SPARSEC_TRACE_OUT (default
// kernel_trace.csv): kind, start and end (ns, GPU clock), graph id, graph
// node id, stream, blocks (a kernel's grid; bytes for copies and sets),
// name (demangled). bench/gpu/step_trace.py runs a model
// under it and splits the records into decode steps.
//
// Build (bench/gpu/step_trace.py does it):
//   g++ -O2 -shared -fPIC -I/usr/local/cuda/include kernel_trace.cpp
//       -L/usr/local/cuda/lib64 -lcupti -o libsparsec_kernel_trace.so
//
//===----------------------------------------------------------------------===//

#include <cupti.h>

#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Record {
  char kind; // 'k' kernel, 'c' memcpy, 's' memset
  uint64_t start, end;
  uint32_t graphId, stream;
  uint64_t node;
  int64_t blocks; // kernels: the grid's blocks; copies and sets: bytes
  std::string name;
};

// Never destroyed: CUPTI may hand over buffers during the process's
// teardown, after static destructors would have run.
std::mutex &mutex = *new std::mutex;
std::vector<Record> &records = *new std::vector<Record>;
bool enabled = false;
std::atomic<bool> written{false};
std::atomic<bool> stopping{false};

std::string demangle(const char *name) {
  if (!name)
    return "?";
  int status = 0;
  char *d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : name;
  std::free(d);
  return out;
}

void CUPTIAPI bufferRequested(uint8_t **buffer, size_t *size,
                              size_t *maxRecords) {
  constexpr size_t kBytes = 8 << 20;
  *buffer = static_cast<uint8_t *>(aligned_alloc(8, kBytes));
  *size = *buffer ? kBytes : 0;
  *maxRecords = 0;
}

void CUPTIAPI bufferCompleted(CUcontext, uint32_t, uint8_t *buffer, size_t,
                              size_t valid) {
  CUpti_Activity *a = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  while (!written &&
         cuptiActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS) {
    if (a->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
        a->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      auto *k = reinterpret_cast<CUpti_ActivityKernel10 *>(a);
      records.push_back({'k', k->start, k->end, k->graphId, k->streamId,
                         k->graphNodeId,
                         int64_t(k->gridX) * k->gridY * k->gridZ,
                         demangle(k->name)});
    } else if (a->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      auto *m = reinterpret_cast<CUpti_ActivityMemcpy6 *>(a);
      records.push_back({'c', m->start, m->end, m->graphId, m->streamId,
                         m->graphNodeId, int64_t(m->bytes), "memcpy"});
    } else if (a->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      auto *m = reinterpret_cast<CUpti_ActivityMemset4 *>(a);
      records.push_back({'s', m->start, m->end, m->graphId, m->streamId,
                         m->graphNodeId, int64_t(m->bytes), "memset"});
    }
  }
  std::free(buffer);
}

/// The CUDA runtime tears its context down at exit before write() runs
/// (its exit handler was registered later): take every record while the
/// context is still there.
void CUPTIAPI onResource(void *, CUpti_CallbackDomain domain,
                         CUpti_CallbackId id, const void *) {
  if (domain == CUPTI_CB_DOMAIN_RESOURCE &&
      id == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING)
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

void write() {
  if (!enabled)
    return;
  stopping = true;
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  const char *path = std::getenv("SPARSEC_TRACE_OUT");
  std::FILE *f = std::fopen(path ? path : "kernel_trace.csv", "w");
  if (!f) {
    std::fprintf(stderr, "kernel_trace: cannot write %s\n",
                 path ? path : "kernel_trace.csv");
    return;
  }
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(f, "kind,start,end,graph,node,stream,blocks,name\n");
  for (const Record &r : records) {
    std::string name = r.name;
    for (char &c : name)
      if (c == '"')
        c = '\'';
    std::fprintf(f, "%c,%llu,%llu,%u,%llu,%u,%lld,\"%s\"\n", r.kind,
                 (unsigned long long)r.start, (unsigned long long)r.end,
                 r.graphId, (unsigned long long)r.node, r.stream,
                 (long long)r.blocks, name.c_str());
  }
  std::fclose(f);
  std::fprintf(stderr, "kernel_trace: %zu records\n", records.size());
  written = true; // later buffers (teardown) are dropped
}

__attribute__((constructor)) void start() {
  // Records come in the layout of the CUPTI that runs; an older one than
  // these headers would be misread.
  uint32_t version = 0;
  Dl_info info{};
  dladdr(reinterpret_cast<void *>(&cuptiActivityEnable), &info);
  const char *lib = info.dli_fname ? info.dli_fname : "?";
  if (cuptiGetVersion(&version) != CUPTI_SUCCESS ||
      version < CUPTI_API_VERSION) {
    std::fprintf(stderr,
                 "kernel_trace: %s has CUPTI API version %u, older than the "
                 "%u it was built for: not tracing\n",
                 lib, version, unsigned(CUPTI_API_VERSION));
    return;
  }
  std::fprintf(stderr, "kernel_trace: %s, CUPTI API version %u\n", lib,
               version);
  CUpti_SubscriberHandle subscriber;
  if (cuptiSubscribe(&subscriber, onResource, nullptr) == CUPTI_SUCCESS)
    cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                        CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
  if (cuptiActivityRegisterCallbacks(bufferRequested, bufferCompleted) !=
      CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel_trace: CUPTI callbacks refused\n");
    return;
  }
  bool ok = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) ==
            CUPTI_SUCCESS;
  ok = ok && cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) == CUPTI_SUCCESS;
  ok = ok && cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) == CUPTI_SUCCESS;
  if (!ok) {
    std::fprintf(stderr, "kernel_trace: CUPTI activity refused\n");
    return;
  }
  enabled = true;
  // Completed records are taken every 5 ms as well, so that a teardown
  // that drops CUPTI's buffers loses at most the last few steps.
  std::thread([] {
    while (!stopping) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (!stopping)
        cuptiActivityFlushAll(0);
    }
  }).detach();
  // Registered before the CUDA runtime's own exit handler (the runtime
  // starts later), so this runs after it; onResource has taken the
  // records by then.
  std::atexit(write);
}

} // namespace
