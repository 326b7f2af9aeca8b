// Compile-only: --moe-cuda-pipeline turns each parallel loop nest into a
// kernel and embeds its PTX (format isa) in a gpu.binary. No GPU is needed.
// The host code allocates nothing (every buffer is a view of the caller's
// workspace) and creates, synchronises and destroys no stream: each launch
// is enqueued on the entry's stream argument.
// RUN: moe-opt %s -split-input-file --moe-cuda-pipeline \
// RUN:   | FileCheck %s --implicit-check-not='{{moe\.[a-z_]+ [^=]}}' --implicit-check-not=linalg. \
// RUN:       --implicit-check-not=tensor. --implicit-check-not=memref. \
// RUN:       --implicit-check-not=scf. --implicit-check-not=malloc --implicit-check-not=moe.fingerprint \
// RUN:       --implicit-check-not=mgpuStream --implicit-check-not=mgpuMemAlloc
// Every kernel binary is PTX for sm_90.
// RUN: moe-opt %s -split-input-file --moe-cuda-pipeline | grep 'gpu.binary' \
// RUN:   | not grep -v -e '.target sm_90'
// Every kernel has more than one thread per block along x (the route kernel also has 4 warps
// along y, a token each).
// RUN: moe-opt %s -split-input-file --moe-cuda-pipeline | grep -o 'maxntid [0-9]*, [0-9]*, [0-9]*' \
// RUN:   | not grep -v -E 'maxntid ([2-9]|[1-9][0-9]+), (1|4), 1'
// The chip and PTX features are options of the pipeline.
// RUN: moe-opt %s -split-input-file '--moe-cuda-pipeline=chip=sm_80 features=+ptx70' \
// RUN:   | FileCheck %s --check-prefix=SM80

// Tests that a softmax top-2 f32 layer gives llvm host code launching kernels with sm_90 PTX 8.x:
// the entry takes x, the weights, then the output y, the workspace (i8) and the stream; it checks
// the workspace's size before the first launch. The first kernel (router logits [T, 4]) has a
// thread per expert.
// CHECK-LABEL: module attributes {gpu.container_module}
// CHECK: llvm.func @qwen_layer(
// CHECK-SAME: %[[STREAM:arg[0-9]+]]: !llvm.ptr {moe.gpu_stream}) attributes {llvm.emit_c_interface}
// CHECK: llvm.icmp "ule"
// CHECK: llvm.cond_br
// CHECK: gpu.launch_func <%[[STREAM]] : !llvm.ptr> @[[K0:qwen_layer_kernel]]::@qwen_layer_kernel blocks in ({{.+}}) threads in ({{.+}}) : i64 args(
// CHECK: gpu.launch_func <%[[STREAM]] : !llvm.ptr> @[[K1:qwen_layer_kernel_0]]::@qwen_layer_kernel blocks in
// CHECK: llvm.return
// CHECK: llvm.call @puts
// CHECK: llvm.call @abort
// CHECK: llvm.func @_mlir_ciface_qwen_layer(%{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr {moe.gpu_written, moe.name = "y"}, %{{.+}}: !llvm.ptr {moe.gpu_written, moe.name = "workspace"}, %{{.+}}: !llvm.ptr {moe.gpu_stream})
// CHECK: llvm.call @qwen_layer(
// CHECK: gpu.binary @[[K0]] [#gpu.object<#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">
// CHECK-SAME: assembly = "
// CHECK-SAME: .version 8.
// CHECK-SAME: .target sm_90
// CHECK-SAME: .address_size 64
// CHECK-SAME: .visible .entry qwen_layer_kernel(
// CHECK-SAME: .maxntid 4, 1, 1
// CHECK-SAME: ret;
// CHECK: gpu.binary @[[K1]] [#gpu.object<#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">
// CHECK-SAME: .target sm_90
// CHECK-SAME: .visible .entry qwen_layer_kernel(
// The workspace the entry needs for `tokens` rows of x.
// CHECK: llvm.func @qwen_layer_workspace_bytes(%{{.+}}: i64) -> i64

// SM80-LABEL: module attributes {gpu.container_module}
// SM80: gpu.binary @qwen_layer_kernel [#gpu.object<#nvvm.target<O = 3, chip = "sm_80", features = "+ptx70">
// SM80-SAME: .version 7.0
// SM80-SAME: .target sm_80
// SM80-SAME: .visible .entry qwen_layer_kernel(
func.func @qwen_layer(%x: tensor<?x16xf32>, %wr: tensor<4x16xf32>,
                      %w13: tensor<4x8x16xf32>, %w2: tensor<4x16x4xf32>)
    -> tensor<?x16xf32> attributes {llvm.emit_c_interface} {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2, normalize> activation swiglu
         layout <ep = 1, tp = 1>
       : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4x8x16xf32>,
          tensor<4x16x4xf32>) -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}

// -----

// Tests that a DeepSeek-style bf16 layer gives sm_90 PTX that widens bf16 to f32 and rounds back.
// CHECK-LABEL: module attributes {gpu.container_module}
// CHECK: llvm.func @deepseek_layer(
// CHECK: gpu.launch_func <%{{.+}} : !llvm.ptr> @deepseek_layer_kernel::@deepseek_layer_kernel
// CHECK: llvm.func @_mlir_ciface_deepseek_layer(
// CHECK: gpu.binary @deepseek_layer_kernel [#gpu.object<#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">
// CHECK-SAME: .version 8.
// CHECK-SAME: .target sm_90
// CHECK-SAME: .visible .entry deepseek_layer_kernel(
// CHECK: cvt.f32.bf16
// CHECK: cvt.rn.bf16.f32

// SM80-LABEL: module attributes {gpu.container_module}
// SM80: .target sm_80
func.func @deepseek_layer(%x: tensor<?x64xbf16>, %wr: tensor<32x64xbf16>,
                          %b: tensor<32xf32>, %w13: tensor<32x48x64xbf16>,
                          %w2: tensor<32x64x24xbf16>, %s13: tensor<48x64xbf16>,
                          %s2: tensor<64x24xbf16>) -> tensor<?x64xbf16>
    attributes {llvm.emit_c_interface} {
  %y = moe.layer %x router(%wr bias %b) experts(%w13, %w2) shared(%s13, %s2)
         routing <sigmoid, top_k = 4, n_group = 8, topk_group = 4, normalize,
                  scale = 2.5, correction_bias>
         activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xbf16>, tensor<32x64xbf16>, tensor<32xf32>,
          tensor<32x48x64xbf16>, tensor<32x64x24xbf16>, tensor<48x64xbf16>,
          tensor<64x24xbf16>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}
