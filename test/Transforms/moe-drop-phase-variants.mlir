// RUN: moe-opt %s -split-input-file --moe-drop-phase-variants | FileCheck %s
// RUN: moe-opt %s -split-input-file --inline --moe-drop-phase-variants | FileCheck %s --check-prefix=INLINED

// Tests that variants still called stay, and that once inlined into their entry they are
// erased (a function the plan does not name stays either way).
// CHECK-DAG: func.func @f_prefill(
// CHECK-DAG: func.func @f_decode(
// CHECK-DAG: func.func @other(
// INLINED-NOT: func.func @f_prefill(
// INLINED-NOT: func.func @f_decode(
// INLINED-DAG: func.func @other(
// INLINED-DAG: func.func @f(
func.func @f_prefill(%x: i32) -> i32 {
  %c = arith.constant 1 : i32
  %y = arith.addi %x, %c : i32
  return %y : i32
}
func.func @f_decode(%x: i32) -> i32 {
  %c = arith.constant 2 : i32
  %y = arith.addi %x, %c : i32
  return %y : i32
}
func.func @other(%x: i32) -> i32 {
  return %x : i32
}
func.func @f(%x: i32, %decode: i1) -> i32
    attributes {moe.phase_plan = {decode = "f_decode", decode_max_tokens = 8 : i64,
                                  prefill = "f_prefill"}} {
  %y = scf.if %decode -> (i32) {
    %d = func.call @f_decode(%x) : (i32) -> i32
    scf.yield %d : i32
  } else {
    %p = func.call @f_prefill(%x) : (i32) -> i32
    scf.yield %p : i32
  }
  return %y : i32
}
