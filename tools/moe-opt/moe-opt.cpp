//===- moe-opt.cpp - mlir-opt for the moe dialect -------------------------===//
#include "moe/InitAll.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  mlir::moe::registerMoECompilerDialects(registry);
  mlir::moe::registerMoECompilerPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "moe optimizer driver\n", registry));
}
