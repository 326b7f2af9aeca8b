// RUN: moe-opt %s -split-input-file -moe-plan-chunks="budget-bytes=100000 max-tokens-per-rank=4096" | FileCheck %s
// RUN: moe-opt %s -split-input-file -moe-plan-chunks="budget-bytes=100000 max-tokens-per-rank=4096" \
// RUN:   -moe-decompose-layer -convert-moe-to-linalg | FileCheck %s --check-prefix=LOOP
// RUN: not moe-opt %s -split-input-file -moe-plan-chunks="budget-bytes=10" 2>&1 | FileCheck %s --check-prefix=TINY
// RUN: not moe-opt %s -split-input-file -moe-plan-chunks 2>&1 | FileCheck %s --check-prefix=NOBUDGET
// RUN: not moe-opt %s -split-input-file -moe-plan-chunks="budget-bytes=100000 max-tokens-per-rank=-1" 2>&1 | FileCheck %s --check-prefix=NEGATIVE

// Tests that an expert-parallel layer too big for the budget is wrapped in an agreed chunk loop
// whose inner layer plans for one chunk.
// CHECK-LABEL: func.func @ep_layer(
// CHECK-SAME: %[[X:[^:]+]]: tensor<?x16xf32>
// CHECK: %[[Y:.+]] = moe.chunk_loop %[[X]] chunk_size = [[C:[0-9]+]] agreed
// CHECK-SAME: moe.chunk_plan = {budget_bytes = 100000 : i64, bytes_per_token = {{[0-9]+}} : i64, chunk_size = [[C]] : i64, max_chunks = {{[0-9]+}} : i64}
// CHECK-NEXT: ^bb0(%[[CHUNK:.+]]: tensor<?x16xf32>):
// CHECK-NEXT: %[[L:.+]] = moe.layer %[[CHUNK]]
// CHECK-SAME: {max_tokens_per_rank = [[C]] : i64}
// CHECK-NEXT: moe.yield %[[L]] : tensor<?x16xf32>
// CHECK: return %[[Y]]

// The lowered loop runs max-over-ranks chunks and slices x once per chunk.
// LOOP-LABEL: func.func @ep_layer(
// LOOP: %[[LOCAL:.+]] = arith.ceildivui
// LOOP: %[[N:.+]] = moe.agree_count %[[LOCAL]] : index
// LOOP: scf.for %{{.+}} = %{{.+}} to %[[N]] step
// LOOP: tensor.extract_slice
// LOOP: moe.ep_dispatch
// LOOP: moe.ep_combine
// LOOP: tensor.insert_slice
// TINY: error: moe-plan-chunks: a budget of 10 bytes does not fit one token
// NOBUDGET: error: moe-plan-chunks needs budget-bytes > 0
// NEGATIVE: error: moe-plan-chunks needs max-tokens-per-rank in [0, 2147483648], got -1
func.func @ep_layer(%x: tensor<?x16xf32>, %wr: tensor<8x16xf32>, %w13: tensor<4x24x16xf32>,
                    %w2: tensor<4x16x12xf32>, %r: tensor<8xi32>) -> tensor<?x16xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) expert_rank(%r)
         routing <softmax, top_k = 2, normalize> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 1000 : i64}
       : (tensor<?x16xf32>, tensor<8x16xf32>, tensor<4x24x16xf32>, tensor<4x16x12xf32>,
          tensor<8xi32>) -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}

// -----

// Tests that a layer whose tokens all fit the budget is left alone, with the decision recorded.
// CHECK-LABEL: func.func @small_layer(
// CHECK-NOT: moe.chunk_loop
// CHECK: moe.layer
// CHECK-SAME: moe.chunk_plan = {budget_bytes = 100000 : i64, bytes_per_token = {{[0-9]+}} : i64, chunk_size = 8 : i64, max_chunks = 1 : i64}
func.func @small_layer(%x: tensor<8x16xf32>, %wr: tensor<8x16xf32>, %w13: tensor<8x24x16xf32>,
                       %w2: tensor<8x16x12xf32>) -> tensor<8x16xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x24x16xf32>, tensor<8x16x12xf32>)
         -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}

// -----

// Tests that a static 0-token layer plans no chunk (issue 9: the chunk count divided by a chunk
// size of 0, SIGFPE): chunk size 1, 0 chunks, no loop.
// CHECK-LABEL: func.func @zero_tokens(
// CHECK-NOT: moe.chunk_loop
// CHECK: moe.layer
// CHECK-SAME: moe.chunk_plan = {budget_bytes = 100000 : i64, bytes_per_token = {{[0-9]+}} : i64, chunk_size = 1 : i64, max_chunks = 0 : i64}
func.func @zero_tokens(%x: tensor<0x16xf32>, %wr: tensor<8x16xf32>, %w13: tensor<8x24x16xf32>,
                       %w2: tensor<8x16x12xf32>) -> tensor<0x16xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<0x16xf32>, tensor<8x16xf32>, tensor<8x24x16xf32>, tensor<8x16x12xf32>)
         -> tensor<0x16xf32>
  return %y : tensor<0x16xf32>
}
