//===- GPUFp8DecodeTest.cpp - The GPU kernels' E4M3 code decoding ---------===//
//
// The decode form of the GPU GEMM turns FP8 weights into bf16 mma operands
// with integer and bf16 vector ops (Kernel::loadCodes8). Those ops are
// target independent: this test builds them into a CPU function, runs it for
// all 256 codes and compares each bf16 with LLVM's own E4M3 decoding
// (APFloat's Float8E4M3FN), so the bit layout is checked without a GPU.
//
//===----------------------------------------------------------------------===//
#include "../lib/Conversion/MoEToGPU/GemmKernel.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVMPass.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/ExecutionEngine/CRunnerUtils.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"

#include "llvm/ADT/APFloat.h"
#include "llvm/Support/TargetSelect.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>

using namespace mlir;

namespace {
/// decode(codes: memref<256xi8>, out: memref<128xi32>): out[4i..4i+4) are
/// loadCodes8 of codes[8i..8i+8).
OwningOpRef<ModuleOp> buildDecoder(MLIRContext &ctx) {
  OpBuilder b(&ctx);
  Location loc = b.getUnknownLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());
  auto codesType = MemRefType::get({256}, b.getI8Type());
  auto outType = MemRefType::get({128}, b.getI32Type());
  auto func = func::FuncOp::create(b, loc, "decode", b.getFunctionType({codesType, outType}, {}));
  func->setAttr("llvm.emit_c_interface", b.getUnitAttr());
  b.setInsertionPointToStart(func.addEntryBlock());
  Value codes = func.getArgument(0), out = func.getArgument(1);
  moe::gemm::Kernel kernel{{b, loc}, {}, {}, {}, {}, {}, {}, 0, 0, 0};
  for (int64_t run = 0; run < 32; ++run) {
    SmallVector<Value> regs = kernel.loadCodes8(codes, {kernel.idx(8 * run)});
    for (int64_t i = 0; i < 4; ++i)
      memref::StoreOp::create(b, loc, regs[i], out, ValueRange{kernel.idx(4 * run + i)});
  }
  func::ReturnOp::create(b, loc);
  return module;
}

/// The value of the bf16 with bits `bits`.
double bf16Value(uint16_t bits) {
  uint32_t wide = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof f);
  return f;
}

TEST(GPUFp8Decode, EveryCodeBecomesItsExactBf16) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  DialectRegistry registry;
  registry.insert<arith::ArithDialect, func::FuncDialect, memref::MemRefDialect,
                  vector::VectorDialect, LLVM::LLVMDialect>();
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  OwningOpRef<ModuleOp> module = buildDecoder(ctx);
  ASSERT_TRUE(succeeded(verify(*module)));

  // The bf16 multiply runs as f32 (exact either way: a power of two); the
  // rest is lowered as the GPU pipeline lowers it.
  PassManager pm(&ctx);
  arith::ArithEmulateUnsupportedFloatsOptions emulate;
  emulate.sourceTypeStrs = {"bf16"};
  pm.addPass(arith::createArithEmulateUnsupportedFloats(emulate));
  arith::ArithExpandOpsPassOptions expand;
  expand.includeBf16 = true;
  pm.addPass(arith::createArithExpandOpsPass(expand));
  pm.addPass(createConvertVectorToLLVMPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  ASSERT_TRUE(succeeded(pm.run(*module)));

  auto engine = ExecutionEngine::create(*module);
  ASSERT_TRUE(bool(engine)) << llvm::toString(engine.takeError());
  // Every code at an even and at an odd place (each half of a register).
  for (int shift : {0, 1}) {
    alignas(8) uint8_t codes[256];
    alignas(8) int32_t words[128];
    for (int at = 0; at < 256; ++at)
      codes[at] = static_cast<uint8_t>(at + shift);
    StridedMemRefType<uint8_t, 1> codesRef{codes, codes, 0, {256}, {1}};
    StridedMemRefType<int32_t, 1> wordsRef{words, words, 0, {128}, {1}};
    auto *codesArg = &codesRef;
    auto *wordsArg = &wordsRef;
    void *args[] = {&codesArg, &wordsArg};
    ASSERT_FALSE(bool((*engine)->invokePacked("_mlir_ciface_decode", args)));
    for (int at = 0; at < 256; ++at) {
      llvm::APFloat expected(llvm::APFloat::Float8E4M3FN(), llvm::APInt(8, codes[at]));
      if (expected.isNaN()) // 0x7F and 0xFF: not valid weights.
        continue;
      // The code at `at` is half at % 2 of register at / 2 (the low half
      // first).
      auto bits = static_cast<uint16_t>(uint32_t(words[at / 2]) >> (16 * (at % 2)));
      double got = bf16Value(bits);
      EXPECT_EQ(got, expected.convertToDouble()) << "code 0x" << std::hex << int(codes[at]);
      EXPECT_EQ(std::signbit(got), expected.isNegative())
          << "code 0x" << std::hex << int(codes[at]);
    }
  }
}
} // namespace
