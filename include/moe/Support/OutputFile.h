//===- OutputFile.h - All-or-nothing output files ---------------*- C++ -*-===//
//
// The tools' outputs are replaced whole: written to a temporary file next to
// the output and renamed onto it, so that a failed write leaves the earlier
// file as it was. What is at the output path decides how:
//   - nothing, or a regular file: a temporary next to it, renamed onto it;
//   - a symbolic link to a regular file: the same at the link's target, so
//     the link stays a link (`current.json -> v3.json` updates v3.json);
//   - anything else (a FIFO, a terminal, /dev/null), and the process's
//     streams by name (/dev/stdout, /dev/fd/N): written directly, never
//     renamed over or removed, since a rename would replace the device node
//     or pipe.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_SUPPORT_OUTPUTFILE_H
#define MOE_SUPPORT_OUTPUTFILE_H

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace mlir::moe {

/// Where an output for `path` is written, and whether directly.
struct OutputTarget {
  /// The path to write or rename onto: `path` with its symbolic links
  /// resolved when it names a regular file, else `path` itself.
  std::string path;
  /// Written directly (not a regular file, or a stream by name).
  bool direct = false;
};
OutputTarget outputTarget(llvm::StringRef path);

/// Writes `path` all or nothing as above ("-": stdout).
llvm::Error writeOutputFile(llvm::StringRef path,
                            llvm::function_ref<void(llvm::raw_ostream &)> write);

/// An output written now and published later, once another output is in
/// place: a temporary next to its path (removed on a signal), renamed onto
/// it by publish() and removed when it goes unpublished. Where the output is
/// written directly (see above: "-", a pipe, a device, /dev/fd/N) its text
/// waits in memory and publish() opens it; a directory or a path without
/// write access fails now, before the other output.
class StagedOutput {
public:
  StagedOutput(StagedOutput &&other);
  StagedOutput &operator=(StagedOutput &&) = delete;
  ~StagedOutput();
  llvm::Error publish();

private:
  friend llvm::Expected<StagedOutput>
  stageOutputFile(llvm::StringRef path, llvm::function_ref<void(llvm::raw_ostream &)> write);
  StagedOutput(std::string path);
  std::string path;      ///< as given
  std::string temporary; ///< empty: written directly, from `text`
  std::string text;
};
llvm::Expected<StagedOutput> stageOutputFile(llvm::StringRef path,
                                             llvm::function_ref<void(llvm::raw_ostream &)> write);

/// A pattern for a temporary file of an output to `path` (for
/// llvm::sys::fs::createUniqueFile): next to the file it replaces, or in the
/// system's temporary directory when the output is written directly.
std::string temporaryPattern(llvm::StringRef path);

/// Moves the finished file `temporary` to `path` as above: a rename onto the
/// target (a copy where the rename fails, e.g. across file systems; a copy
/// that fails is removed again), or a copy into a path written directly.
llvm::Error publishOutputFile(llvm::StringRef temporary, llvm::StringRef path);

} // namespace mlir::moe

#endif // MOE_SUPPORT_OUTPUTFILE_H
