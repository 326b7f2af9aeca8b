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

/// decodeRows(codes: memref<1x256xi8>, scales: memref<1x2xf32>, out:
/// memref<128xi32>): out[4i..4i+4) are loadRow8 of codes[0, 8i..8i+8) with
/// their group's scale (groups of 128), as the decode form reads an FP8
/// dispatch's rows.
OwningOpRef<ModuleOp> buildRowDecoder(MLIRContext &ctx) {
  OpBuilder b(&ctx);
  Location loc = b.getUnknownLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());
  auto codesType = MemRefType::get({1, 256}, b.getI8Type());
  auto scalesType = MemRefType::get({1, 2}, b.getF32Type());
  auto outType = MemRefType::get({128}, b.getI32Type());
  auto func = func::FuncOp::create(b, loc, "decodeRows",
                                   b.getFunctionType({codesType, scalesType, outType}, {}));
  func->setAttr("llvm.emit_c_interface", b.getUnitAttr());
  b.setInsertionPointToStart(func.addEntryBlock());
  moe::gemm::Kernel kernel{{b, loc}, func.getArgument(0), {}, {}, {}, {}, {}, 0, 0, 256};
  kernel.codeScales = func.getArgument(1);
  kernel.codeGroup = 128;
  Value out = func.getArgument(2);
  for (int64_t run = 0; run < 32; ++run) {
    SmallVector<Value> regs = kernel.loadRow8(kernel.idx(0), kernel.idx(8 * run));
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

/// Builds `module` (from `build`) for this CPU: the bf16 arithmetic runs
/// as f32 (the decoding's bf16 multiply by a power of two is exact either
/// way) and truncf to bf16 rounds to nearest even, as cvt.rn does on the
/// GPU; the rest is lowered as the GPU pipeline lowers it.
std::unique_ptr<ExecutionEngine> jit(MLIRContext &ctx, ModuleOp module) {
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
  if (failed(pm.run(module)))
    return nullptr;
  auto engine = ExecutionEngine::create(module);
  if (!engine) {
    llvm::consumeError(engine.takeError());
    return nullptr;
  }
  return std::move(*engine);
}

struct GPUFp8Decode : ::testing::Test {
  void SetUp() override {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    registry.insert<arith::ArithDialect, func::FuncDialect, memref::MemRefDialect,
                    vector::VectorDialect, LLVM::LLVMDialect>();
    registerBuiltinDialectTranslation(registry);
    registerLLVMDialectTranslation(registry);
    ctx = std::make_unique<MLIRContext>(registry);
    ctx->loadAllAvailableDialects();
  }
  DialectRegistry registry;
  std::unique_ptr<MLIRContext> ctx;
};

/// f32 `v` rounded to the nearest bf16, ties to even (finite `v`).
double roundedToBf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  bits += 0x7fff + ((bits >> 16) & 1);
  return bf16Value(static_cast<uint16_t>(bits >> 16));
}

TEST_F(GPUFp8Decode, EveryCodeBecomesItsExactBf16) {
  OwningOpRef<ModuleOp> module = buildDecoder(*ctx);
  ASSERT_TRUE(succeeded(verify(*module)));
  std::unique_ptr<ExecutionEngine> engine = jit(*ctx, *module);
  ASSERT_TRUE(engine);
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
    ASSERT_FALSE(bool(engine->invokePacked("_mlir_ciface_decode", args)));
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

/// Every code of an FP8 dispatch's row, with each of its two groups' scales
/// (one whose products need rounding, one tiny enough for f32 subnormals),
/// becomes bf16(f32(code) * scale): what a receiver that dequantizes to bf16
/// would give the GEMM.
TEST_F(GPUFp8Decode, EveryRowCodeBecomesItsScaledBf16) {
  OwningOpRef<ModuleOp> module = buildRowDecoder(*ctx);
  ASSERT_TRUE(succeeded(verify(*module)));
  std::unique_ptr<ExecutionEngine> engine = jit(*ctx, *module);
  ASSERT_TRUE(engine);
  for (float scale : {0.3711f, 1.0f / 448.0f, 1e-37f}) {
    alignas(8) uint8_t codes[256];
    for (int at = 0; at < 256; ++at)
      codes[at] = static_cast<uint8_t>(at);
    float scales[2] = {scale, -2.5f * scale};
    alignas(8) int32_t words[128];
    StridedMemRefType<uint8_t, 2> codesRef{codes, codes, 0, {1, 256}, {256, 1}};
    StridedMemRefType<float, 2> scalesRef{scales, scales, 0, {1, 2}, {2, 1}};
    StridedMemRefType<int32_t, 1> wordsRef{words, words, 0, {128}, {1}};
    auto *codesArg = &codesRef;
    auto *scalesArg = &scalesRef;
    auto *wordsArg = &wordsRef;
    void *args[] = {&codesArg, &scalesArg, &wordsArg};
    ASSERT_FALSE(bool(engine->invokePacked("_mlir_ciface_decodeRows", args)));
    for (int at = 0; at < 256; ++at) {
      llvm::APFloat code(llvm::APFloat::Float8E4M3FN(), llvm::APInt(8, codes[at]));
      auto bits = static_cast<uint16_t>(uint32_t(words[at / 2]) >> (16 * (at % 2)));
      double got = bf16Value(bits);
      if (code.isNaN()) {
        EXPECT_TRUE(std::isnan(got)) << "code 0x" << std::hex << at;
        continue;
      }
      float product = static_cast<float>(code.convertToDouble()) * scales[at / 128];
      EXPECT_EQ(got, roundedToBf16(product)) << "code 0x" << std::hex << at << " scale " << scale;
      EXPECT_EQ(std::signbit(got), std::signbit(product)) << "code 0x" << std::hex << at;
    }
  }
}
} // namespace
