//===- Main.cpp - The command line of a compiled model --------------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//
//
// modelMain implements `run`, `bench` and `info` for the generated model
// binaries. Every user mistake (option, input file, shape, weight pack) is
// reported on stderr with exit status 1; nothing here may crash.
//
//===----------------------------------------------------------------------===//

#include "Cli.h"
#include "sparsec/rt/Half.h"
#include "sparsec/rt/Runtime.h"
#include "sparsec/rt/Profile.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <map>

#include <unistd.h>

namespace sparsec::rt {

namespace cli {

//===----------------------------------------------------------------------===//
// Shared by the commands (Cli.h)
//===----------------------------------------------------------------------===//

int reportError(const std::string &message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

bool parseInt(const std::string &text, int64_t &value) {
  if (text.empty())
    return false;
  errno = 0;
  char *end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || end == text.c_str())
    return false;
  value = v;
  return true;
}

std::string executableDir(const char *argv0) {
  char buf[4096];
  ssize_t len = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string exe;
  if (len > 0) {
    exe.assign(buf, size_t(len));
  } else if (argv0) {
    exe = argv0;
  }
  size_t slash = exe.rfind('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : exe.substr(0, slash);
}

std::string joinPath(const std::string &dir, const std::string &file) {
  if (dir.empty())
    return file;
  return dir.back() == '/' ? dir + file : dir + "/" + file;
}

std::string fileSafe(const std::string &name) {
  std::string s = name;
  for (char &c : s)
    if (!std::isalnum(uint8_t(c)) && c != '.' && c != '_' && c != '-')
      c = '_';
  return s;
}

static bool loadWeights(const ModelDesc &desc, const char *argv0,
                 std::unique_ptr<WeightPack> &pack, std::string &error) {
  if (!desc.weightsFile || !*desc.weightsFile) {
    if (desc.numWeights == 0)
      return true;
    error = "the model has weights but no weight file name";
    return false;
  }
  std::string path = joinPath(executableDir(argv0), desc.weightsFile);
  pack = WeightPack::open(path, desc.numWeights, desc.weightsChecksum,
                          /*verifyPayload=*/true, error);
  return pack != nullptr;
}

bool Session::open(const ModelDesc &desc, const char *argv0, int threads,
                   std::string &error) {
  if (!loadWeights(desc, argv0, pack, error))
    return false;
  ctx = std::make_unique<Context>(desc, pack.get(), threads);
  if (!ctx->ok()) {
    error = ctx->error;
    return false;
  }
  return true;
}

static const char *dimName(const IODesc &io, int i) {
  const char *name = io.dimNames[i];
  return name && *name ? name : nullptr;
}

/// "float32[1, seq, 256]".
static std::string describeIO(const IODesc &io) {
  std::string s = dtypeName(io.dtype);
  s += '[';
  for (int i = 0; i < io.rank; ++i) {
    if (i)
      s += ", ";
    if (io.dims[i] >= 0)
      s += std::to_string(io.dims[i]);
    else
      s += dimName(io, i) ? dimName(io, i) : "?";
  }
  return s + ']';
}

/// Whether `t` is what the binary was compiled for as input `io`: its
/// element type, rank, fixed sizes, and the dynamic ones within their
/// maximum; if not, `error` says which and how.
static bool checkInputShape(const IODesc &io, const Tensor &t, std::string &error) {
  const std::string prefix = std::string("input '") + io.name + "'";
  // An attention's past also reads float16 (a device's 16-bit KV cache).
  const bool halfPast =
      io.attentionPast && io.dtype == DType::f32 && t.dtype == DType::f16;
  if (t.dtype != io.dtype && !halfPast) {
    error = prefix + ": expected " + dtypeName(io.dtype) + ", got " +
            dtypeName(t.dtype);
    return false;
  }
  if (t.rank != io.rank) {
    error = prefix + ": expected rank " + std::to_string(io.rank) + " (" +
            describeIO(io) + "), got rank " + std::to_string(t.rank) + " (" +
            t.describe() + ")";
    return false;
  }
  for (int d = 0; d < io.rank; ++d) {
    const int64_t v = t.shape[d];
    std::string where = prefix + " dim " + std::to_string(d);
    if (io.dims[d] >= 0) {
      if (v != io.dims[d]) {
        error = where + ": expected " + std::to_string(io.dims[d]) + ", got " +
                std::to_string(v) + " (expected " + describeIO(io) + ", got " +
                t.describe() + ")";
        return false;
      }
    } else if (io.maxDims[d] > 0 && v > io.maxDims[d]) {
      if (const char *dn = dimName(io, d))
        where += std::string(" (") + dn + ")";
      error = where + " = " + std::to_string(v) + " exceeds the maximum " +
              std::to_string(io.maxDims[d]) + " this binary was compiled for";
      return false;
    }
  }
  return true;
}

/// Runs the model once; returns false with the model's error. Whatever
/// built the inputs (a file, generate's steps), they are checked first.
bool runOnce(const ModelDesc &desc, Context &ctx, const Tensor *inputs,
             std::vector<Tensor> &outputs, std::string &error) {
  for (int i = 0; i < desc.numInputs; ++i)
    if (!checkInputShape(desc.inputs[i], inputs[i], error))
      return false;
  ctx.error.clear();
  bool ok = desc.run(ctx, inputs, outputs.data());
  if (ok && ctx.ok())
    return true;
  error = ctx.error.empty() ? "the model failed without a message" : ctx.error;
  return false;
}

} // namespace cli

namespace {
using namespace cli;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//


std::string listNames(int count, const IODesc *ios) {
  std::string s;
  for (int i = 0; i < count; ++i) {
    if (i)
      s += ", ";
    s += ios[i].name;
  }
  return s;
}



std::string jsonString(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      if (uint8_t(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", unsigned(uint8_t(c)));
        out += buf;
      } else {
        out += c;
      }
    }
  }
  return out + "\"";
}


//===----------------------------------------------------------------------===//
// Options
//===----------------------------------------------------------------------===//

void printUsage(FILE *out, const char *prog, const ModelDesc &desc) {
  std::fprintf(
      out,
      "%s: the compiled model '%s'\n"
      "\n"
      "usage:\n"
      "  %s run --input NAME=FILE.npy ... [--output-dir DIR] [--threads N]\n"
      "  %s bench [--input NAME=FILE.npy ...] [--dim NAME=VALUE ...]\n"
      "        [--runs N] [--warmup N] [--threads N] [--json]\n"
      "  %s info\n"
      "  %s eval --text FILE [--seq-len N] [--max-chunks N]\n"
      "        [--save-top1 FILE] [--compare-top1 FILE] [--threads N]\n"
      "  %s generate (--prompt TEXT | --prompt-ids FILE.npy)\n"
      "        [--max-new-tokens N] [--max-seq-len N] [--temperature T]\n"
      "        [--top-k K] [--top-p P] [--seed S] [--warmup N] [--threads N]\n"
      "\n"
      "commands:\n"
      "  run    run the model once and write DIR/<output>.npy per output\n"
      "  bench  time the model; inputs not given are synthesized, dynamic\n"
      "         dims at their maximum (1 where unbounded) unless set with --dim\n"
      "  info   describe the inputs, outputs and weights\n"
      "  eval   byte-level LMs: loss (nats/byte) over a text file cut into\n"
      "         --seq-len chunks (default 128); --save-top1 writes each\n"
      "         position's most likely next byte, --compare-top1 reports the\n"
      "         agreement with such a file (e.g. from the dense build)\n"
      "  generate  decoder LMs: continue a prompt (greedy, or sampled with\n"
      "         --temperature > 0, --top-k, --top-p, --seed), streamed to\n"
      "         stdout (raw bytes for byte-level models); timing on stderr;\n"
      "         --prompt-ids [B, n] decodes B prompts as one batch (one line\n"
      "         of ids per prompt at the end)\n"
      "\n"
      "options:\n"
      "  --input NAME=FILE.npy  an input (repeat for each input)\n"
      "  --output-dir DIR       where run writes outputs (default: .)\n"
      "  --threads N            worker threads (default: all cores)\n"
      "  --runs N               timed runs for bench (default: 20)\n"
      "  --warmup N             untimed runs before timing (default: 3);\n"
      "                         generate warms up (one run over the first\n"
      "                         token; on a GPU also one over the prompt)\n"
      "                         unless N is 0, so that time to first token\n"
      "                         leaves out one-time setup (device, weights)\n"
      "  --dim NAME=VALUE       value of a dynamic dim for bench\n"
      "  --json                 bench prints one JSON object\n",
      prog, desc.name, prog, prog, prog, prog, prog);
}

/// Parses argv into `opts`; returns false with a message.
bool parseOptions(int argc, char **argv, Options &opts, std::string &error) {
  opts.command = argv[1];
  const std::string &cmd = opts.command;
  bool isRun = cmd == "run", isBench = cmd == "bench",
       isProfile = cmd == "profile", isEval = cmd == "eval",
       isGenerate = cmd == "generate";
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i] ? argv[i] : "";
    if (arg == "--help" || arg == "-h") {
      opts.help = true;
      continue;
    }
    // "--name=value" or "--name value".
    std::string name = arg, value;
    bool hasValue = false;
    if (arg.rfind("--", 0) == 0) {
      size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        name = arg.substr(0, eq);
        value = arg.substr(eq + 1);
        hasValue = true;
      }
    }
    auto takeValue = [&]() {
      if (hasValue)
        return true;
      if (i + 1 >= argc || !argv[i + 1]) {
        error = "option '" + name + "' expects a value";
        return false;
      }
      value = argv[++i];
      return true;
    };
    auto positive = [&](int64_t &out, int64_t min, int64_t max) {
      if (!parseInt(value, out) || out < min || out > max) {
        error = "option '" + name + "' expects an integer in [" +
                std::to_string(min) + ", " + std::to_string(max) + "], got '" +
                value + "'";
        return false;
      }
      return true;
    };
    bool allowed = true;
    if (name == "--input" && (isRun || isBench)) {
      if (!takeValue())
        return false;
      size_t eq = value.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == value.size()) {
        error = "--input expects NAME=FILE.npy, got '" + value + "'";
        return false;
      }
      opts.inputs.emplace_back(value.substr(0, eq), value.substr(eq + 1));
    } else if (name == "--output-dir" && isRun) {
      if (!takeValue())
        return false;
      if (value.empty()) {
        error = "--output-dir expects a directory";
        return false;
      }
      opts.outputDir = value;
    } else if (name == "--input-list" && isProfile) {
      if (!takeValue())
        return false;
      opts.inputList = value;
    } else if (name == "--samples" && isProfile) {
      if (!takeValue() || !positive(opts.samples, 0, int64_t(1) << 24))
        return false;
    } else if (name == "--quiet" && isProfile) {
      opts.quiet = true;
    } else if (name == "--sample-every" && isProfile) {
      if (!takeValue() || !positive(opts.sampleEvery, 1, int64_t(1) << 40))
        return false;
    } else if ((name == "-o" || name == "--output") && isProfile) {
      if (!takeValue())
        return false;
      opts.profileOut = value;
    } else if (name == "--text" && isEval) {
      if (!takeValue())
        return false;
      opts.text = value;
    } else if (name == "--seq-len" && isEval) {
      if (!takeValue() || !positive(opts.seqLen, 2, int64_t(1) << 24))
        return false;
    } else if (name == "--max-chunks" && isEval) {
      if (!takeValue() || !positive(opts.maxChunks, 1, int64_t(1) << 40))
        return false;
    } else if (name == "--save-top1" && isEval) {
      if (!takeValue())
        return false;
      opts.saveTop1 = value;
    } else if (name == "--compare-top1" && isEval) {
      if (!takeValue())
        return false;
      opts.compareTop1 = value;
    } else if (name == "--prompt" && isGenerate) {
      if (!takeValue())
        return false;
      opts.prompt = value;
      if (value.empty()) {
        error = "the prompt is empty";
        return false;
      }
    } else if (name == "--prompt-ids" && isGenerate) {
      if (!takeValue())
        return false;
      opts.promptIds = value;
    } else if (name == "--max-new-tokens" && isGenerate) {
      if (!takeValue() || !positive(opts.maxNewTokens, 1, int64_t(1) << 30))
        return false;
    } else if (name == "--max-seq-len" && isGenerate) {
      if (!takeValue() || !positive(opts.maxSeqLen, 1, int64_t(1) << 30))
        return false;
    } else if (name == "--top-k" && isGenerate) {
      if (!takeValue() || !positive(opts.topK, 0, int64_t(1) << 30))
        return false;
    } else if ((name == "--temperature" || name == "--top-p") && isGenerate) {
      if (!takeValue())
        return false;
      char *end = nullptr;
      double v = std::strtod(value.c_str(), &end);
      bool temp = name == "--temperature";
      if (value.empty() || *end || !(v >= 0.0) || (temp ? v > 100.0 : (v <= 0.0 || v > 1.0))) {
        error = temp ? "--temperature expects a number in [0, 100], got '" + value + "'"
                     : "--top-p expects a number in (0, 1], got '" + value + "'";
        return false;
      }
      (temp ? opts.temperature : opts.topP) = v;
    } else if (name == "--seed" && isGenerate) {
      int64_t seed;
      if (!takeValue() || !positive(seed, 0, INT64_MAX))
        return false;
      opts.seed = uint64_t(seed);
    } else if (name == "--threads" &&
               (isRun || isBench || isProfile || isEval || isGenerate)) {
      int64_t n;
      if (!takeValue() || !positive(n, 1, 1024))
        return false;
      opts.threads = int(n);
    } else if (name == "--runs" && isBench) {
      if (!takeValue() || !positive(opts.runs, 1, 1000000000))
        return false;
    } else if (name == "--warmup" && (isBench || isGenerate)) {
      if (!takeValue() || !positive(opts.warmup, 0, 1000000000))
        return false;
    } else if (name == "--json" && isBench && !hasValue) {
      opts.json = true;
    } else if (name == "--dim" && isBench) {
      if (!takeValue())
        return false;
      size_t eq = value.find('=');
      int64_t v;
      if (eq == std::string::npos || eq == 0 ||
          !parseInt(value.substr(eq + 1), v) || v < 1) {
        error = "--dim expects NAME=VALUE with VALUE >= 1, got '" + value + "'";
        return false;
      }
      opts.dims.emplace_back(value.substr(0, eq), v);
    } else {
      allowed = false;
    }
    if (!allowed) {
      if (arg.rfind("-", 0) == 0)
        error = "unknown option '" + name + "' for '" + cmd + "'";
      else
        error = "unexpected argument '" + arg + "' for '" + cmd + "'";
      return false;
    }
  }
  if (opts.threads <= 0)
    opts.threads = int(std::max(1u, std::thread::hardware_concurrency()));
  return true;
}

//===----------------------------------------------------------------------===//
// Inputs
//===----------------------------------------------------------------------===//

/// The value bound to a dynamic dim name, and where it came from.
struct DimBinding {
  int64_t value;
  std::string origin;
};

class InputSet {
public:
  explicit InputSet(const ModelDesc &desc)
      : desc_(desc), storage_(size_t(std::max(desc.numInputs, 0))),
        tensors_(size_t(std::max(desc.numInputs, 0))),
        given_(size_t(std::max(desc.numInputs, 0)), false) {}

  /// Loads and checks the --input files. With `requireAll`, every model
  /// input must be given.
  bool load(const Options &opts, bool requireAll, std::string &error) {
    for (const auto &[name, file] : opts.inputs) {
      int index = -1;
      for (int i = 0; i < desc_.numInputs; ++i)
        if (name == desc_.inputs[i].name)
          index = i;
      if (index < 0) {
        error = "unknown input '" + name + "'; the model's inputs are: " +
                listNames(desc_.numInputs, desc_.inputs);
        return false;
      }
      if (given_[size_t(index)]) {
        error = "input '" + name + "' is given more than once";
        return false;
      }
      given_[size_t(index)] = true;
      if (!readNpy(file, storage_[size_t(index)], tensors_[size_t(index)],
                   error))
        return false;
      if (!check(index, error))
        return false;
    }
    if (requireAll) {
      for (int i = 0; i < desc_.numInputs; ++i) {
        if (!given_[size_t(i)]) {
          error = std::string("missing input '") + desc_.inputs[i].name +
                  "' (pass --input " + desc_.inputs[i].name + "=FILE.npy)";
          return false;
        }
      }
    }
    return true;
  }

  /// Binds --dim values (after the loaded inputs, which take precedence
  /// only if they agree).
  bool bindDims(const Options &opts, std::string &error) {
    for (const auto &[name, value] : opts.dims) {
      const IODesc *io = nullptr;
      int dim = -1;
      for (int i = 0; i < desc_.numInputs && !io; ++i)
        for (int d = 0; d < desc_.inputs[i].rank; ++d)
          if (desc_.inputs[i].dims[d] < 0 && dimName(desc_.inputs[i], d) &&
              name == dimName(desc_.inputs[i], d)) {
            io = &desc_.inputs[i];
            dim = d;
            break;
          }
      if (!io) {
        std::string known = dynamicDimNames();
        error = "unknown dynamic dim '" + name + "'; " +
                (known.empty() ? "the model has no named dynamic dims"
                               : "the model's dynamic dims are: " + known);
        return false;
      }
      if (io->maxDims[dim] > 0 && value > io->maxDims[dim]) {
        error = "--dim " + name + "=" + std::to_string(value) +
                " exceeds the maximum " + std::to_string(io->maxDims[dim]) +
                " this binary was compiled for";
        return false;
      }
      auto it = bindings_.find(name);
      if (it != bindings_.end() && it->second.value != value) {
        error = "--dim " + name + "=" + std::to_string(value) +
                " does not match " + it->second.origin + " = " +
                std::to_string(it->second.value);
        return false;
      }
      bindings_[name] = {value, "--dim " + name};
    }
    return true;
  }

  /// Fills the inputs not given: zeros for ids (ones for masks), and
  /// deterministic pseudo-random values in [-1, 1) for floats.
  bool synthesize(std::string &error) {
    for (int i = 0; i < desc_.numInputs; ++i) {
      if (given_[size_t(i)])
        continue;
      const IODesc &io = desc_.inputs[i];
      Tensor &t = tensors_[size_t(i)];
      t.dtype = io.dtype;
      t.rank = io.rank;
      for (int d = 0; d < io.rank; ++d) {
        int64_t v = io.dims[d];
        if (v < 0) {
          const char *dn = dimName(io, d);
          auto it = dn ? bindings_.find(dn) : bindings_.end();
          v = it != bindings_.end() ? it->second.value
              : io.maxDims[d] > 0   ? io.maxDims[d]
                                    : 1;
          if (dn && it == bindings_.end())
            bindings_[dn] = {v, "the maximum of " + std::string(dn)};
        }
        t.shape[d] = v;
      }
      size_t bytes = t.bytes();
      if (!storage_[size_t(i)].ensure(bytes)) {
        error = "cannot allocate " + std::to_string(bytes) +
                " bytes for input '" + io.name + "'";
        return false;
      }
      t.data = storage_[size_t(i)].data();
      fill(t, io.name, uint64_t(i));
    }
    return true;
  }

  const Tensor *tensors() const { return tensors_.data(); }

private:
  std::string dynamicDimNames() const {
    std::string s;
    std::vector<std::string> seen;
    for (int i = 0; i < desc_.numInputs; ++i)
      for (int d = 0; d < desc_.inputs[i].rank; ++d) {
        const char *dn = dimName(desc_.inputs[i], d);
        if (desc_.inputs[i].dims[d] >= 0 || !dn ||
            std::find(seen.begin(), seen.end(), dn) != seen.end())
          continue;
        seen.push_back(dn);
        s += (s.empty() ? "" : ", ") + std::string(dn);
      }
    return s;
  }

  bool check(int index, std::string &error) {
    const IODesc &io = desc_.inputs[index];
    const Tensor &t = tensors_[size_t(index)];
    if (!checkInputShape(io, t, error))
      return false;
    // Dynamic dims of one name agree across the inputs.
    for (int d = 0; d < io.rank; ++d) {
      const char *dn = dimName(io, d);
      if (io.dims[d] >= 0 || !dn)
        continue;
      const int64_t v = t.shape[d];
      const std::string where = std::string("input '") + io.name + "' dim " +
                                std::to_string(d) + " (" + dn + ")";
      auto it = bindings_.find(dn);
      if (it != bindings_.end() && it->second.value != v) {
        error = where + " = " + std::to_string(v) + " does not match " +
                it->second.origin + " = " + std::to_string(it->second.value);
        return false;
      }
      if (it == bindings_.end())
        bindings_[dn] = {v, where};
    }
    return true;
  }

  static void fill(Tensor &t, const std::string &name, uint64_t seed) {
    int64_t n = t.numel();
    std::string lower = name;
    for (char &c : lower)
      c = char(std::tolower(uint8_t(c)));
    bool mask = lower.find("mask") != std::string::npos;
    uint64_t state = 0x9e3779b97f4a7c15ULL * (seed + 1);
    auto next = [&]() {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      // Top 24 bits -> [-1, 1).
      return float(int32_t(state >> 40) - (1 << 23)) / float(1 << 23);
    };
    for (int64_t i = 0; i < n; ++i) {
      switch (t.dtype) {
      case DType::f32:
        t.as<float>()[i] = next();
        break;
      case DType::f64:
        t.as<double>()[i] = next();
        break;
      case DType::f16:
        t.as<uint16_t>()[i] = floatToHalf(next());
        break;
      default: {
        // Integers and bools: little-endian 1 or 0 of the element's width.
        size_t size = dtypeSize(t.dtype);
        char *p = t.as<char>() + size_t(i) * size;
        std::memset(p, 0, size);
        p[0] = mask ? 1 : 0;
        break;
      }
      }
    }
  }

  const ModelDesc &desc_;
  std::vector<Buffer> storage_;
  std::vector<Tensor> tensors_;
  std::vector<bool> given_;
  std::map<std::string, DimBinding> bindings_;
};

//===----------------------------------------------------------------------===//
// Commands
//===----------------------------------------------------------------------===//




int commandRun(const Options &opts, const ModelDesc &desc, const char *argv0) {
  std::string error;
  InputSet inputs(desc);
  if (!inputs.load(opts, /*requireAll=*/true, error))
    return reportError(error);
  Session session;
  if (!session.open(desc, argv0, opts.threads, error))
    return reportError(error);
  Context &ctx = *session.ctx;

  std::error_code ec;
  std::filesystem::create_directories(opts.outputDir, ec);
  if (ec || !std::filesystem::is_directory(opts.outputDir, ec))
    return reportError("cannot create output directory '" + opts.outputDir +
                       "'" + (ec ? ": " + ec.message() : ""));

  std::vector<Tensor> outputs(size_t(std::max(desc.numOutputs, 0)));
  if (!runOnce(desc, ctx, inputs.tensors(), outputs, error))
    return reportError(error);

  std::vector<std::string> used;
  for (int i = 0; i < desc.numOutputs; ++i) {
    std::string base =
        fileSafe(desc.outputs[i].name ? desc.outputs[i].name : "");
    if (base.empty())
      base = "output" + std::to_string(i);
    // Distinct outputs may sanitize to the same name.
    std::string file = base;
    for (int k = 1; std::find(used.begin(), used.end(), file) != used.end();
         ++k)
      file = base + "_" + std::to_string(k);
    used.push_back(file);
    std::string path = joinPath(opts.outputDir, file + ".npy");
    if (!writeNpy(path, outputs[size_t(i)], error))
      return reportError(error);
    std::printf("wrote %s %s\n", path.c_str(),
                outputs[size_t(i)].describe().c_str());
  }
  std::fflush(stdout);
  return 0;
}

int commandBench(const Options &opts, const ModelDesc &desc,
                 const char *argv0) {
  std::string error;
  InputSet inputs(desc);
  if (!inputs.load(opts, /*requireAll=*/false, error) ||
      !inputs.bindDims(opts, error) || !inputs.synthesize(error))
    return reportError(error);
  Session session;
  if (!session.open(desc, argv0, opts.threads, error))
    return reportError(error);
  Context &ctx = *session.ctx;
  std::vector<Tensor> outputs(size_t(std::max(desc.numOutputs, 0)));

  for (int64_t i = 0; i < opts.warmup; ++i)
    if (!runOnce(desc, ctx, inputs.tensors(), outputs, error))
      return reportError(error);
  std::vector<double> ms;
  ms.reserve(size_t(opts.runs));
  const int64_t active0 = ctx.sparseActive, total0 = ctx.sparseTotal;
  for (int64_t i = 0; i < opts.runs; ++i) {
    auto start = std::chrono::steady_clock::now();
    bool ok = runOnce(desc, ctx, inputs.tensors(), outputs, error);
    auto end = std::chrono::steady_clock::now();
    if (!ok)
      return reportError(error);
    ms.push_back(
        std::chrono::duration<double, std::milli>(end - start).count());
  }
  double mean = 0;
  for (double v : ms)
    mean += v;
  mean /= double(ms.size());
  std::sort(ms.begin(), ms.end());
  size_t n = ms.size();
  double median = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
  size_t p90Index = size_t(std::ceil(0.9 * double(n))) - 1;
  double p90 = ms[std::min(p90Index, n - 1)];
  // Sparse builds: the share of neurons the sparse kernels computed (the
  // CPU kernels select per token, so a batch costs no density).
  const int64_t sparseTotal = ctx.sparseTotal - total0;
  const double density =
      sparseTotal > 0 ? double(ctx.sparseActive - active0) / double(sparseTotal) : -1;

  const Tensor *ts = inputs.tensors();
  if (opts.json) {
    std::string s = "{\"model\": " + jsonString(desc.name) +
                    ", \"threads\": " + std::to_string(ctx.pool.size()) +
                    ", \"runs\": " + std::to_string(opts.runs) +
                    ", \"warmup\": " + std::to_string(opts.warmup) +
                    ", \"latency_ms\": {";
    char buf[160];
    std::snprintf(buf, sizeof(buf),
                  "\"min\": %.4f, \"median\": %.4f, \"p90\": %.4f, "
                  "\"mean\": %.4f",
                  ms.front(), median, p90, mean);
    s += buf;
    s += "}";
    if (density >= 0) {
      std::snprintf(buf, sizeof(buf), ", \"sparse_density\": %.4f", density);
      s += buf;
    }
    s += ", \"inputs\": {";
    for (int i = 0; i < desc.numInputs; ++i) {
      s += (i ? ", " : "") + jsonString(desc.inputs[i].name) + ": [";
      for (int d = 0; d < ts[i].rank; ++d)
        s += (d ? ", " : "") + std::to_string(ts[i].shape[d]);
      s += "]";
    }
    s += "}}";
    std::printf("%s\n", s.c_str());
  } else {
    std::printf("model    %s\n", desc.name);
    std::printf("threads  %d\n", ctx.pool.size());
    for (int i = 0; i < desc.numInputs; ++i)
      std::printf("input    %s %s\n", desc.inputs[i].name,
                  ts[i].describe().c_str());
    std::printf("runs     %" PRId64 " (after %" PRId64 " warmup)\n", opts.runs,
                opts.warmup);
    std::printf("latency  min %.3f ms  median %.3f ms  p90 %.3f ms  "
                "mean %.3f ms\n",
                ms.front(), median, p90, mean);
    if (density >= 0)
      std::printf("density  %.4f of the neurons computed by the sparse kernels\n",
                  density);
  }
  std::fflush(stdout);
  return 0;
}

int commandInfo(const ModelDesc &desc) {
  std::printf("model: %s\n", desc.name);
  auto printIOs = [](const char *title, int count, const IODesc *ios) {
    std::printf("%s:\n", title);
    for (int i = 0; i < count; ++i)
      std::printf("  %s %s\n", ios[i].name, describeIO(ios[i]).c_str());
  };
  printIOs("inputs", desc.numInputs, desc.inputs);
  printIOs("outputs", desc.numOutputs, desc.outputs);

  std::vector<std::string> seen;
  std::string dims;
  for (int i = 0; i < desc.numInputs; ++i) {
    const IODesc &io = desc.inputs[i];
    for (int d = 0; d < io.rank; ++d) {
      if (io.dims[d] >= 0)
        continue;
      std::string name =
          dimName(io, d) ? dimName(io, d)
                         : std::string(io.name) + "[" + std::to_string(d) + "]";
      if (std::find(seen.begin(), seen.end(), name) != seen.end())
        continue;
      seen.push_back(name);
      dims += "  " + name + " <= " +
              (io.maxDims[d] > 0 ? std::to_string(io.maxDims[d])
                                 : std::string("(unbounded)")) +
              "\n";
    }
  }
  if (!dims.empty())
    std::printf("dynamic dims:\n%s", dims.c_str());
  std::printf("weights: %s (%u segments, checksum 0x%016" PRIx64 ")\n",
              desc.weightsFile && *desc.weightsFile ? desc.weightsFile
                                                    : "(none)",
              desc.numWeights, desc.weightsChecksum);
  int64_t staticBytes = 0;
  int dynamicSlots = 0;
  for (int i = 0; i < desc.numSlots && desc.slotBytes; ++i) {
    if (desc.slotBytes[i] >= 0)
      staticBytes += desc.slotBytes[i];
    else
      ++dynamicSlots;
  }
  std::printf("slots: %d (%" PRId64 " bytes preallocated, %d sized at run "
              "time)\n",
              desc.numSlots, staticBytes, dynamicSlots);
  std::fflush(stdout);
  return 0;
}

/// Profiling builds: runs every input set of the list, accumulating the
/// activation counters, and writes them as a .sprof file.
int commandProfile(const Options &opts, const ModelDesc &desc,
                   const char *argv0) {
  if (desc.numProfileSites <= 0)
    return reportError("this binary was not built for profiling "
                       "(use `sparsec profile`)");
  if (opts.inputList.empty() || opts.profileOut.empty())
    return reportError("profile needs --input-list FILE and -o OUT.sprof");
  std::ifstream list(opts.inputList);
  if (!list)
    return reportError("cannot open input list '" + opts.inputList + "'");
  std::vector<std::string> lines;
  for (std::string line; std::getline(list, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos)
      lines.push_back(line);
  if (lines.empty())
    return reportError("input list '" + opts.inputList + "' is empty");
  std::string error;
  Session session;
  if (!session.open(desc, argv0, opts.threads, error))
    return reportError(error);
  Context &ctx = *session.ctx;
  ctx.profileMaxSamples = opts.samples;
  ctx.profileSampleEvery = opts.sampleEvery;
  std::vector<Tensor> outputs(size_t(std::max(desc.numOutputs, 0)));
  bool tty = isatty(fileno(stderr));
  for (size_t i = 0; i < lines.size(); ++i) {
    Options one = opts;
    one.inputs.clear();
    std::istringstream words(lines[i]);
    for (std::string w; words >> w;) {
      size_t eq = w.find('=');
      if (eq == std::string::npos || eq == 0)
        return reportError(opts.inputList + ":" + std::to_string(i + 1) +
                           ": expected NAME=FILE.npy, got '" + w + "'");
      one.inputs.emplace_back(w.substr(0, eq), w.substr(eq + 1));
    }
    InputSet inputs(desc);
    if (!inputs.load(one, /*requireAll=*/true, error) ||
        !runOnce(desc, ctx, inputs.tensors(), outputs, error))
      return reportError(opts.inputList + ":" + std::to_string(i + 1) + ": " +
                         error);
    if (!opts.quiet && (tty || i + 1 == lines.size() || (i + 1) % 16 == 0))
      std::fprintf(stderr, "%s[profile] %zu/%zu runs%s", tty ? "\r" : "",
                   i + 1, lines.size(), tty ? "" : "\n");
  }
  if (tty && !opts.quiet)
    std::fprintf(stderr, "\n");
  Profile profile;
  profile.modelHash = desc.modelHash;
  profile.model = desc.name;
  for (int s = 0; s < desc.numProfileSites; ++s) {
    ProfileSite site;
    site.name = desc.profileSites[s];
    if (size_t(s) < ctx.profileCounts.size()) {
      site.counts = ctx.profileCounts[size_t(s)];
      site.tokens = ctx.profileTokens[size_t(s)];
    }
    site.neurons = int64_t(site.counts.size());
    if (site.neurons == 0)
      return reportError("profile site '" + site.name +
                         "' was never executed");
    if (size_t(s) < ctx.profileSamples.size()) {
      Context::Samples &samples = ctx.profileSamples[size_t(s)];
      site.samples = samples.count;
      site.inputDim = samples.inputDim;
      site.sampleInputs = std::move(samples.inputs);
      site.sampleMasks = std::move(samples.masks);
    }
    if (size_t(s) < ctx.profileTiles.size() &&
        ctx.profileTiles[size_t(s)].counts.size() == 3 * size_t(site.neurons)) {
      Context::Tiles &t = ctx.profileTiles[size_t(s)];
      for (int i = 0; i < 3; ++i) {
        site.tileRows.push_back(Context::kProfileTileRows[i]);
        site.tileBlocks.push_back(t.blocks[i]);
      }
      site.tileCounts = std::move(t.counts);
    }
    profile.sites.push_back(std::move(site));
  }
  if (!writeProfile(opts.profileOut, profile, error))
    return reportError(error);
  std::printf("wrote %s (%d sites)\n", opts.profileOut.c_str(),
              desc.numProfileSites);
  return 0;
}

int modelMainImpl(int argc, char **argv, const ModelDesc &desc) {
  const char *prog = argc > 0 && argv[0] ? argv[0] : desc.name;
  if (argc < 2 || !argv[1]) {
    printUsage(stderr, prog, desc);
    return 1;
  }
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    printUsage(stdout, prog, desc);
    return 0;
  }
  if (cmd != "run" && cmd != "bench" && cmd != "info" && cmd != "profile" &&
      cmd != "eval" && cmd != "generate") {
    std::fprintf(stderr,
                 "error: unknown command '%s' (expected run, bench, eval, generate "
                 "or info; "
                 "see --help)\n",
                 cmd.c_str());
    return 1;
  }
  Options opts;
  std::string error;
  if (!parseOptions(argc, argv, opts, error))
    return reportError(error + " (see --help)");
  if (opts.help) {
    printUsage(stdout, prog, desc);
    return 0;
  }
  if (cmd == "info")
    return commandInfo(desc);
  if (cmd == "run")
    return commandRun(opts, desc, argc > 0 ? argv[0] : nullptr);
  if (cmd == "profile")
    return commandProfile(opts, desc, argc > 0 ? argv[0] : nullptr);
  if (cmd == "eval")
    return commandEval(opts, desc, argc > 0 ? argv[0] : nullptr);
  if (cmd == "generate")
    return commandGenerate(opts, desc, argc > 0 ? argv[0] : nullptr);
  return commandBench(opts, desc, argc > 0 ? argv[0] : nullptr);
}

} // namespace

int modelMain(int argc, char **argv, const ModelDesc &desc) {
  // The runtime reports errors by value; this only catches what the standard
  // library may throw (bad_alloc, filesystem errors), so that the binary
  // never ends with an uncaught exception.
  try {
    return modelMainImpl(argc, argv, desc);
  } catch (const std::exception &e) {
    return reportError(std::string("internal error: ") + e.what());
  }
}

} // namespace sparsec::rt
