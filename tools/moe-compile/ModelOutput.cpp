//===- ModelOutput.cpp - moe-compile --model: a checkpoint to a directory -===//
#include "ModelOutput.h"

#include "moe/Import/Checkpoint.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>

#include <sys/stat.h>

using namespace mlir;
using namespace mlir::moe;
namespace json = llvm::json;

namespace {
constexpr llvm::StringLiteral kFormat = "moe-compile model 1";

int fail(const llvm::Twine &message) {
  llvm::errs() << "moe-compile: error: " << message << "\n";
  return 1;
}

/// Removes a directory tree on scope exit unless released.
struct DirectoryRemover {
  std::string path;
  ~DirectoryRemover() {
    if (!path.empty())
      llvm::sys::fs::remove_directories(path);
  }
};

/// Progress of a long step on stderr: a line rewritten in place on a
/// terminal, a line per tenth otherwise.
class Progress {
public:
  Progress(llvm::StringRef what, size_t total) : what(what.str()), total(total) {}
  void step(size_t done, llvm::StringRef item) {
    double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    double eta = done ? elapsed / done * (total - done) : 0.0;
    bool terminal = llvm::errs().is_displayed();
    if (!terminal && done != total && done * 10 / total == (done - 1) * 10 / total)
      return;
    llvm::errs() << (terminal ? "\r" : "") << "moe-compile: " << what << " "
                 << done << "/" << total << " (" << item << ")"
                 << llvm::formatv(", {0:f1} s, ETA {1:f1} s", elapsed, eta)
                 << (terminal && done != total ? "" : "\n");
  }

private:
  using Clock = std::chrono::steady_clock;
  std::string what;
  size_t total;
  Clock::time_point start = Clock::now();
};

bool isEmptyDirectory(llvm::StringRef path) {
  std::error_code ec;
  llvm::sys::fs::directory_iterator it(path, ec);
  return !ec && it == llvm::sys::fs::directory_iterator();
}

/// The permissions `mkdir` would give a new directory: createUniqueDirectory
/// makes a private one, but the output is for whoever may read its parent.
llvm::sys::fs::perms newDirectoryPermissions() {
  mode_t mask = ::umask(0);
  ::umask(mask);
  return static_cast<llvm::sys::fs::perms>(llvm::sys::fs::all_all & ~mask);
}

bool isEarlierOutput(llvm::StringRef out) {
  llvm::SmallString<256> manifest(out);
  llvm::sys::path::append(manifest, "manifest.json");
  auto text = llvm::MemoryBuffer::getFile(manifest);
  return text && (*text)->getBuffer().contains(kFormat);
}
} // namespace

int moe_compile::compileModel(llvm::StringRef dirRef, llvm::StringRef outRef, ConfigCheck check,
                              CompileLayer compile, llvm::StringRef entryRef,
                              llvm::StringRef dtypeRef, llvm::StringRef runtimeDir,
                              KeepFp8Weights keepFp8Weights, bool cuda) {
  // Copies: `compile` reassigns the options these may point into. `-o out/`
  // names the directory out.
  const std::string dir = dirRef.str(), entry = entryRef.str(), dtype = dtypeRef.str();
  std::string out = outRef.str();
  while (out.size() > 1 && llvm::sys::path::is_separator(out.back()))
    out.pop_back();
  llvm::Expected<std::unique_ptr<Checkpoint>> opened = Checkpoint::open(dir);
  if (!opened)
    return fail(llvm::toString(opened.takeError()));
  const Checkpoint &checkpoint = **opened;
  const MoELayerConfig &config = checkpoint.config();
  if (auto problem = check(config))
    return fail(checkpoint.configPath() + ": " + *problem);
  if (config.moeLayers.empty())
    return fail(checkpoint.configPath() + ": no decoder layer has a MoE block");

  // Every layer's tensors are found and checked before anything is written.
  TensorDType element = dtype == "bf16" ? TensorDType::BF16 : TensorDType::F32;
  std::vector<std::vector<LayerTensor>> layers;
  for (int64_t layer : config.moeLayers) {
    auto tensors = checkpoint.layerTensors(layer, element, keepFp8Weights(config));
    if (!tensors)
      return fail(llvm::toString(tensors.takeError()));
    layers.push_back(std::move(*tensors));
  }

  bool replace = false;
  if (llvm::sys::fs::exists(out)) {
    if (!isEarlierOutput(out) && !isEmptyDirectory(out))
      return fail("-o " + out + ": exists and is neither empty nor an earlier "
                  "moe-compile --model output; not overwriting it");
    replace = true;
  }
  // createUniqueDirectory puts a relative prefix under the system's
  // temporary directory: absolute, the temporary is next to the output.
  llvm::SmallString<256> prefix(out + ".tmp"), temporary;
  if (std::error_code ec = llvm::sys::fs::make_absolute(prefix))
    return fail("cannot make " + out + " absolute: " + ec.message());
  llvm::StringRef parent = llvm::sys::path::parent_path(prefix);
  if (!llvm::sys::fs::is_directory(parent))
    return fail("-o " + out + ": the directory it goes in, " + parent + ", does not exist");
  if (std::error_code ec = llvm::sys::fs::createUniqueDirectory(prefix, temporary))
    return fail("cannot create a directory next to " + out + ": " + ec.message());
  DirectoryRemover remover{temporary.str().str()};
  if (std::error_code ec = llvm::sys::fs::setPermissions(temporary, newDirectoryPermissions()))
    return fail("cannot set the permissions of " + temporary + ": " + ec.message());
  auto inTemporary = [&](llvm::StringRef name) {
    llvm::SmallString<256> path(temporary);
    llvm::sys::path::append(path, name);
    return path.str().str();
  };

  std::string libraryName = entry + ".so", planName = entry + ".plan.json";
  if (int rc = compile(checkpoint.configPath(), inTemporary(libraryName),
                       inTemporary(planName)))
    return rc;

  std::vector<std::string> runtimes = {"libmoert.so"};
  if (cuda) // the mgpu* wrappers a CUDA library launches through
    runtimes.push_back("libmoert_cuda.so");
  for (const std::string &name : runtimes) {
    llvm::SmallString<256> runtime(runtimeDir);
    llvm::sys::path::append(runtime, name);
    if (std::error_code ec = llvm::sys::fs::copy_file(runtime, inTemporary(name)))
      return fail("cannot copy " + runtime + " into the output: " + ec.message());
  }

  std::vector<TensorHeader> headers;
  std::vector<const LayerTensor *> sources;
  json::Array manifestLayers;
  for (size_t l = 0; l < layers.size(); ++l) {
    json::Object tensors;
    for (const LayerTensor &t : layers[l]) {
      std::string name = llvm::formatv("layers.{0}.{1}", config.moeLayers[l], t.parameter);
      headers.push_back({name, t.dtype, t.shape});
      sources.push_back(&t);
      tensors[t.parameter] = name;
    }
    manifestLayers.push_back(
        json::Object{{"index", config.moeLayers[l]}, {"tensors", std::move(tensors)}});
  }
  Progress progress("weights: layer", layers.size());
  size_t perLayer = layers.front().size();
  if (llvm::Error e = writeSafetensors(
          inTemporary("weights.safetensors"), headers,
          [&](size_t i, llvm::raw_ostream &os) {
            writeLayerTensor(*sources[i], os);
            if ((i + 1) % perLayer == 0)
              progress.step((i + 1) / perLayer,
                            "decoder layer " +
                                std::to_string(config.moeLayers[i / perLayer]));
          }))
    return fail(llvm::toString(std::move(e)));

  llvm::SmallString<256> source(dir);
  llvm::sys::fs::make_absolute(source);
  llvm::sys::path::remove_dots(source, /*remove_dot_dot=*/true);
  json::Object manifest{
      {"format", kFormat},
      {"model_type", config.modelType},
      {"source", source.str()},
      {"element_type", dtype},
      {"target", cuda ? "cuda" : "cpu"},
      {"library", json::Object{{"file", libraryName}, {"entry", entry}, {"plan", planName}}},
      {"weights", "weights.safetensors"},
      {"layers", std::move(manifestLayers)}};
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(inTemporary("manifest.json"), ec);
    if (ec)
      return fail("cannot write the manifest: " + ec.message());
    os << llvm::formatv("{0:2}\n", json::Value(std::move(manifest)));
    if (os.has_error())
      return fail("cannot write the manifest: " + os.error().message());
  }

  if (replace)
    if (std::error_code ec = llvm::sys::fs::remove_directories(out))
      return fail("cannot replace " + out + ": " + ec.message());
  if (std::error_code ec = llvm::sys::fs::rename(temporary, out))
    return fail("cannot move the output to " + out + ": " + ec.message());
  remover.path.clear();
  llvm::errs() << "moe-compile: " << out << ": " << layers.size() << " MoE layers of "
               << config.modelType << " (" << libraryName << ", " << llvm::join(runtimes, ", ")
               << ", weights.safetensors, manifest.json)\n";
  return 0;
}
