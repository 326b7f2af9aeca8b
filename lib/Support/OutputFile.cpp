//===- OutputFile.cpp - All-or-nothing output files -----------------------===//
#include "moe/Support/OutputFile.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Signals.h"

using namespace mlir::moe;
namespace fs = llvm::sys::fs;

namespace {
llvm::Error cannotWrite(llvm::StringRef path, std::error_code ec) {
  return llvm::createStringError(ec, "cannot write " + path + ": " + ec.message());
}

/// The process's own streams by name (/dev/stdout, /dev/fd/3, ...): what
/// they point at must be written, not renamed over.
bool namesAStream(llvm::StringRef path) {
  return path == "/dev/stdin" || path == "/dev/stdout" || path == "/dev/stderr" ||
         path.starts_with("/dev/fd/") || path.starts_with("/proc/self/fd/");
}
} // namespace

OutputTarget mlir::moe::outputTarget(llvm::StringRef path) {
  OutputTarget target{path.str(), false};
  if (namesAStream(path)) {
    target.direct = true;
    return target;
  }
  fs::file_status status;
  if (fs::status(path, status)) // nothing there (or a dangling link): create it
    return target;
  if (!fs::is_regular_file(status)) {
    target.direct = true;
    return target;
  }
  llvm::SmallString<256> real;
  if (!fs::real_path(path, real))
    target.path = real.str().str();
  return target;
}

/// Writes `write`'s output to `os`, then checks that it all arrived.
static llvm::Error writeChecked(llvm::StringRef path, llvm::raw_fd_ostream &os,
                                llvm::function_ref<void(llvm::raw_ostream &)> write) {
  write(os);
  os.flush();
  if (!os.has_error())
    return llvm::Error::success();
  std::error_code ec = os.error();
  os.clear_error();
  return cannotWrite(path, ec);
}

llvm::Error mlir::moe::writeOutputFile(llvm::StringRef path,
                                       llvm::function_ref<void(llvm::raw_ostream &)> write) {
  if (path == "-")
    return writeChecked(path, llvm::outs(), write);
  OutputTarget target = outputTarget(path);
  if (target.direct) {
    std::error_code ec;
    llvm::raw_fd_ostream os(target.path, ec, fs::OF_None);
    if (ec)
      return cannotWrite(path, ec);
    return writeChecked(path, os, write);
  }
  llvm::Expected<fs::TempFile> temporary =
      fs::TempFile::create(target.path + ".tmp-%%%%%%", fs::all_read | fs::all_write);
  if (!temporary)
    return cannotWrite(path, llvm::errorToErrorCode(temporary.takeError()));
  llvm::Error written = [&] {
    llvm::raw_fd_ostream os(temporary->FD, /*shouldClose=*/false);
    return writeChecked(path, os, write);
  }();
  if (written) {
    llvm::consumeError(temporary->discard());
    return written;
  }
  if (llvm::Error kept = temporary->keep(target.path))
    return llvm::createStringError("cannot write " + path + ": " + llvm::toString(std::move(kept)));
  return llvm::Error::success();
}

llvm::Expected<StagedOutput>
mlir::moe::stageOutputFile(llvm::StringRef path,
                           llvm::function_ref<void(llvm::raw_ostream &)> write) {
  StagedOutput staged(path.str());
  OutputTarget target = outputTarget(path);
  if (path == "-" || target.direct) {
    // Checked now, opened when published: opening a FIFO waits for its
    // reader, who may read the other output first.
    if (path != "-" && fs::is_directory(target.path))
      return cannotWrite(path, std::make_error_code(std::errc::is_a_directory));
    if (path != "-")
      if (std::error_code ec = fs::access(target.path, fs::AccessMode::Write))
        return cannotWrite(path, ec);
    llvm::raw_string_ostream os(staged.text);
    write(os);
    return staged;
  }
  int fd = -1;
  llvm::SmallString<256> temporary;
  if (std::error_code ec = fs::createUniqueFile(target.path + ".tmp-%%%%%%", fd, temporary))
    return cannotWrite(path, ec);
  staged.temporary = temporary.str().str();
  llvm::sys::RemoveFileOnSignal(staged.temporary);
  llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
  if (llvm::Error e = writeChecked(path, os, write))
    return std::move(e); // `staged` removes the temporary
  return staged;
}

StagedOutput::StagedOutput(std::string path) : path(std::move(path)) {}

StagedOutput::StagedOutput(StagedOutput &&other)
    : path(std::move(other.path)), temporary(std::move(other.temporary)),
      text(std::move(other.text)) {
  other.temporary.clear();
}

StagedOutput::~StagedOutput() {
  if (temporary.empty())
    return;
  fs::remove(temporary);
  llvm::sys::DontRemoveFileOnSignal(temporary);
}

llvm::Error StagedOutput::publish() {
  if (temporary.empty())
    return writeOutputFile(path, [&](llvm::raw_ostream &os) { os << text; });
  // Renamed, or copied (then the temporary is still there): gone either way.
  llvm::Error e = publishOutputFile(temporary, path);
  if (!e) {
    fs::remove(temporary);
    llvm::sys::DontRemoveFileOnSignal(temporary);
    temporary.clear();
  }
  return e;
}

std::string mlir::moe::temporaryPattern(llvm::StringRef path) {
  OutputTarget target = outputTarget(path);
  if (!target.direct)
    return target.path + ".tmp-%%%%%%";
  llvm::SmallString<256> pattern;
  llvm::sys::path::system_temp_directory(/*ErasedOnReboot=*/true, pattern);
  llvm::sys::path::append(pattern, "moe-output-%%%%%%");
  return pattern.str().str();
}

llvm::Error mlir::moe::publishOutputFile(llvm::StringRef temporary, llvm::StringRef path) {
  OutputTarget target = outputTarget(path);
  if (!target.direct && !fs::rename(temporary, target.path))
    return llvm::Error::success();
  if (std::error_code ec = fs::copy_file(temporary, target.path)) {
    // A partial copy is removed; a directory, device or pipe at the path is
    // the user's and stays.
    if (!target.direct && !fs::is_directory(target.path))
      fs::remove(target.path);
    return cannotWrite(path, ec);
  }
  return llvm::Error::success();
}
