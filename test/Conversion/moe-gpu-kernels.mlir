// RUN: moe-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(moe-gpu-block-threads{threads=128}))' \
// RUN:   | FileCheck %s --check-prefix=THREADS
// RUN: moe-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(moe-gpu-block-threads{threads=128},gpu-map-parallel-loops),convert-parallel-loops-to-gpu,moe-gpu-host-check)' \
// RUN:   | FileCheck %s --check-prefix=LAUNCH
// RUN: not moe-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(moe-gpu-block-threads{threads=0}))' 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BAD

// Tests that a [T, 3, 512] loop nest becomes blocks over (T, 3, 512/128) and 128 threads along
// the innermost dimension, which comes first in the tile's loop (thread x), with a guard for a
// partial tile; a dimension of 3 stays a grid dimension.
// THREADS-LABEL: func.func @elementwise
// THREADS: scf.parallel (%[[T:.+]], %[[C:.+]], %[[H:.+]]) = (%{{.+}}, %{{.+}}, %{{.+}}) to (%{{.+}}, %{{.+}}, %{{.+}}) step (%{{.+}}, %{{.+}}, %[[STEP:.+]])
// THREADS: scf.parallel (%[[LANE:.+]], %{{.+}}, %{{.+}}) = (%{{.+}}, %{{.+}}, %{{.+}}) to (%[[N128:.+]], %{{.+}}, %{{.+}})
// THREADS: arith.addi %[[LANE]], %[[H]]
// THREADS: scf.if
// THREADS: memref.store

// LAUNCH-LABEL: func.func @elementwise
// LAUNCH: gpu.launch blocks(%{{.+}}, %{{.+}}, %{{.+}}) in (%{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}) threads(%{{.+}}, %{{.+}}, %{{.+}}) in (%{{.+}} = %[[X:.+]], %{{.+}} = %[[ONE:[^,]+]], %{{.+}} = %[[ONE]])
// BAD: error: moe-gpu-block-threads: threads must be in [1, 1024], got 0
func.func @elementwise(%a: memref<?x3x512xf32>, %b: memref<?x3x512xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c512 = arith.constant 512 : index
  %t = memref.dim %a, %c0 : memref<?x3x512xf32>
  scf.parallel (%i, %j, %k) = (%c0, %c0, %c0) to (%t, %c3, %c512) step (%c1, %c1, %c1) {
    %v = memref.load %a[%i, %j, %k] : memref<?x3x512xf32>
    %w = arith.addf %v, %v : f32
    memref.store %w, %b[%i, %j, %k] : memref<?x3x512xf32>
    scf.reduce
  }
  return
}

// -----

// Tests that a loop over 4 elements gets 4 threads, not 128.
// THREADS-LABEL: func.func @small
// THREADS: %[[C4:.+]] = arith.constant 4 : index
// THREADS: scf.parallel (%{{.+}}) = (%{{.+}}) to (%[[C4]]) step
func.func @small(%a: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %cst = arith.constant 1.0 : f32
  scf.parallel (%i) = (%c0) to (%c4) step (%c1) {
    memref.store %cst, %a[%i] : memref<4xf32>
    scf.reduce
  }
  return
}

// -----

// Tests that parallel (t) { for (j) { parallel (h) } } (the combine's loops) becomes
// parallel (t, h) { for (j) }, whose h gets the block's threads.
// THREADS-LABEL: func.func @combine_like
// THREADS: scf.parallel (%[[T:[^,]+]], %[[H:[^)]+]]) =
// THREADS: scf.parallel (%[[LANE:[^,]+]], %{{[^)]+}}) =
// THREADS: scf.if
// THREADS: scf.for %[[J:.+]] = %{{.+}} to %{{.+}} step
// THREADS: memref.load %{{.+}}[%{{.+}}, %[[J]]] : memref<?x8xf32>
// THREADS: memref.store
// THREADS-NOT: scf.parallel
func.func @combine_like(%w: memref<?x8xf32>, %y: memref<?x512xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c512 = arith.constant 512 : index
  %t = memref.dim %w, %c0 : memref<?x8xf32>
  scf.parallel (%i) = (%c0) to (%t) step (%c1) {
    scf.for %j = %c0 to %c8 step %c1 {
      scf.parallel (%h) = (%c0) to (%c512) step (%c1) {
        %a = memref.load %w[%i, %j] : memref<?x8xf32>
        %b = memref.load %y[%i, %h] : memref<?x512xf32>
        %s = arith.addf %a, %b : f32
        memref.store %s, %y[%i, %h] : memref<?x512xf32>
        scf.reduce
      }
    }
    scf.reduce
  }
  return
}
