// RUN: moe-opt %s -split-input-file --moe-approximate-activation-exp | FileCheck %s --check-prefix=EXP
// RUN: moe-opt %s -split-input-file --moe-parallel-outer-loop | FileCheck %s --check-prefix=LOOP

// Tests that only the exp marked moe.approximable (an activation's) becomes a polynomial;
// routing's exp stays a math.exp.
// EXP-LABEL: func.func @exps
// EXP-NOT: math.exp %{{.+}} {moe.approximable}
// EXP: math.fma
// EXP: %[[KEPT:.+]] = math.exp %{{.+}} : f32
// EXP-NOT: math.exp
// EXP: return %{{.+}}, %[[KEPT]]
func.func @exps(%x: f32) -> (f32, f32) {
  %a = math.exp %x {moe.approximable} : f32
  %b = math.exp %x : f32
  return %a, %b : f32, f32
}

// -----

// Tests that a 2-d scf.parallel keeps its outer dimension parallel and walks the inner one in
// an scf.for, and that a parallel loop inside another becomes sequential.
// LOOP-LABEL: func.func @rows
// LOOP: scf.parallel (%[[R:.+]]) = (%{{.+}}) to (%{{.+}}) step (%{{.+}}) {
// LOOP-NEXT: scf.for %[[C:.+]] = %{{.+}} to %{{.+}} step %{{.+}} {
// LOOP-NEXT: memref.store %{{.+}}, %{{.+}}[%[[R]], %[[C]]]
// LOOP: scf.parallel (%[[T:.+]]) = (%{{.+}}) to (%{{.+}}) step (%{{.+}}) {
// LOOP-NEXT: scf.for %[[J:.+]] =
// LOOP-NEXT: scf.for %[[H:.+]] =
// LOOP-NEXT: memref.load %{{.+}}[%[[T]], %[[H]]]
// LOOP-NOT: scf.parallel
func.func @rows(%m: memref<?x?xf32>, %n: index, %k: index, %v: f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.parallel (%r, %c) = (%c0, %c0) to (%n, %n) step (%c1, %c1) {
    memref.store %v, %m[%r, %c] : memref<?x?xf32>
    scf.reduce
  }
  scf.parallel (%t) = (%c0) to (%n) step (%c1) {
    scf.for %j = %c0 to %k step %c1 {
      scf.parallel (%h) = (%c0) to (%n) step (%c1) {
        %x = memref.load %m[%t, %h] : memref<?x?xf32>
        %y = arith.addf %x, %v : f32
        memref.store %y, %m[%t, %h] : memref<?x?xf32>
        scf.reduce
      }
    }
    scf.reduce
  }
  return
}
