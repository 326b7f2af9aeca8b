// RUN: moe-opt %s -split-input-file -moe-verify-collectives -verify-diagnostics | FileCheck %s

// Tests that collectives outside any control flow are accepted.
// CHECK-LABEL: func.func @straight_line
func.func @straight_line(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                         %rank: tensor<8xi32>) -> tensor<?x64xf32> {
  %rx, %rids, %rw, %h = moe.ep_dispatch %x, %ids, %w, %rank capacity = 64
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  // CHECK: moe.ep_combine
  %y = moe.ep_combine %rx, %h : (tensor<?x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Tests that a loop bounded by moe.agree_count may hold collectives.
// CHECK-LABEL: func.func @agreed_loop
func.func @agreed_loop(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                       %rank: tensor<8xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %t = tensor.dim %x, %c0 : tensor<?x64xf32>
  %local = arith.ceildivui %t, %c16 : index
  %n = moe.agree_count %local : index
  scf.for %i = %c0 to %n step %c1 {
    %rx, %rids, %rw, %h = moe.ep_dispatch %x, %ids, %w, %rank capacity = 64
      : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
        -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  }
  return
}

// -----

// Tests that a condition on a constant or on an argument marked moe.uniform is accepted.
// CHECK-LABEL: func.func @uniform_conditions
func.func @uniform_conditions(%phase: i1 {moe.uniform}, %x: tensor<?x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %yes = arith.cmpi eq, %c0, %c1 : index
  scf.if %phase {
    %n = moe.agree_count %c1 : index
  }
  scf.if %yes {
    %n = moe.agree_count %c0 : index
  }
  return
}

// -----

// Tests that a collective under a condition on the rank's token count is rejected.
func.func @if_on_token_count(%x: tensor<?x64xf32>) {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x64xf32>
  %any = arith.cmpi sgt, %t, %c0 : index
  // expected-note @+1 {{this scf.if decides whether it runs}}
  scf.if %any {
    // expected-error @+1 {{collective under control flow that can differ between ranks: the scf.if condition depends on rank-local data}}
    %n = moe.agree_count %t : index
  }
  return
}

// -----

// Tests that a loop whose trip count is the rank's own chunk count is rejected.
func.func @unagreed_trip_count(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                               %rank: tensor<8xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %t = tensor.dim %x, %c0 : tensor<?x64xf32>
  %local = arith.ceildivui %t, %c16 : index
  // expected-note @+1 {{this scf.for decides whether it runs}}
  scf.for %i = %c0 to %local step %c1 {
    // expected-error @+1 {{the scf.for trip count is not agreed across ranks (bound it by moe.agree_count)}}
    %rx, %rids, %rw, %h = moe.ep_dispatch %x, %ids, %w, %rank capacity = 64
      : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
        -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  }
  return
}

// -----

// Tests that a condition on received rows (rank-local data from a collective) is rejected.
func.func @if_on_received_rows(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                               %rank: tensor<8xi32>) {
  %c0 = arith.constant 0 : index
  %rx, %rids, %rw, %h = moe.ep_dispatch %x, %ids, %w, %rank capacity = 64
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  %r = tensor.dim %rx, %c0 : tensor<?x64xf32>
  %none = arith.cmpi eq, %r, %c0 : index
  // expected-note @+1 {{this scf.if decides whether it runs}}
  scf.if %none {
    // expected-error @+1 {{the scf.if condition depends on rank-local data}}
    %y = moe.ep_combine %rx, %h : (tensor<?x64xf32>, i64) -> tensor<?x64xf32>
  }
  return
}

// -----

// Tests that a chunk loop holding collectives must be agreed.
func.func @unagreed_chunk_loop(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
    %w13: tensor<4x64x64xf32>, %w2: tensor<4x64x32xf32>, %rank: tensor<8xi32>) -> tensor<?x64xf32> {
  // expected-note @+1 {{this moe.chunk_loop decides whether it runs}}
  %y = moe.chunk_loop %x chunk_size = 16 : (tensor<?x64xf32>) -> tensor<?x64xf32> {
  ^bb0(%chunk: tensor<?x64xf32>):
    %ids, %w = moe.route %chunk, %wr routing <softmax, top_k = 2>
      : (tensor<?x64xf32>, tensor<8x64xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
    // expected-error @+1 {{the moe.chunk_loop trip count is not agreed across ranks (mark it 'agreed')}}
    %rx, %rids, %rw, %h = moe.ep_dispatch %chunk, %ids, %w, %rank capacity = 64
      : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
        -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
    moe.yield %rx : tensor<?x64xf32>
  }
  return %y : tensor<?x64xf32>
}

// -----

// Tests that a while loop around a collective is rejected (its trip count cannot be proven).
func.func @while_loop(%x: tensor<?x64xf32>) {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x64xf32>
  %false = arith.constant false
  // expected-note @+1 {{this scf.while decides whether it runs}}
  scf.while : () -> () {
    scf.condition(%false)
  } do {
    // expected-error @+1 {{its trip count or condition cannot be analysed}}
    %n = moe.agree_count %t : index
    scf.yield
  }
  return
}

// -----

// Tests that a branch on rank-local data in a multi-block function is rejected.
func.func @cond_br(%x: tensor<?x64xf32>) {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x64xf32>
  %any = arith.cmpi sgt, %t, %c0 : index
  // expected-note @+1 {{this cf.cond_br decides whether it runs}}
  cf.cond_br %any, ^work, ^done
^work:
  // expected-error @+1 {{a cf.cond_br condition depends on rank-local data}}
  %n = moe.agree_count %t : index
  cf.br ^done
^done:
  return
}

// -----

// Tests that a uniform scf.if choosing between uniform values is uniform: the phase choice
// of an entry whose variants are inlined (by the agreed token count, or the uniform phase
// argument) may decide whether collectives run.
// CHECK-LABEL: func.func @inlined_phase_choice
func.func @inlined_phase_choice(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                                %rank: tensor<8xi32>, %phase: i32 {moe.uniform}) {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %zero = arith.constant 0 : i32
  %two = arith.constant 2 : i32
  %by_count = arith.cmpi eq, %phase, %zero : i32
  %decode = scf.if %by_count -> (i1) {
    %t = tensor.dim %x, %c0 : tensor<?x64xf32>
    %most = moe.agree_count %t for phase_tokens : index
    %fits = arith.cmpi ule, %most, %c8 : index
    scf.yield %fits : i1
  } else {
    %asked = arith.cmpi eq, %phase, %two : i32
    scf.yield %asked : i1
  }
  scf.if %decode {
    // CHECK: moe.ep_dispatch
    %rx, %rids, %rw, %h = moe.ep_dispatch %x, %ids, %w, %rank capacity = 64
      : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
        -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  }
  return
}

// -----

// Tests that an scf.if yielding a rank-local value on one side is not uniform.
func.func @rank_local_choice(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                             %rank: tensor<8xi32>, %phase: i32 {moe.uniform}) {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %zero = arith.constant 0 : i32
  %by_count = arith.cmpi eq, %phase, %zero : i32
  %decode = scf.if %by_count -> (i1) {
    %t = tensor.dim %x, %c0 : tensor<?x64xf32>
    %fits = arith.cmpi ule, %t, %c8 : index
    scf.yield %fits : i1
  } else {
    %false = arith.constant false
    scf.yield %false : i1
  }
  // expected-note @+1 {{this scf.if decides whether it runs}}
  scf.if %decode {
    // expected-error @+1 {{collective under control flow that can differ between ranks: the scf.if condition depends on rank-local data}}
    %rx, %rids, %rw, %h = moe.ep_dispatch %x, %ids, %w, %rank capacity = 64
      : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
        -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  }
  return
}

// -----

// Tests that a call of a function that issues collectives (here through a second call) is held
// to the same rules as the collectives themselves.
func.func private @exchange(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                            %er: tensor<8xi32>) -> tensor<?x64xf32> {
  %a, %b, %d, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 64 ep = 2 max_tokens = 32
      : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  %y = moe.ep_combine %a, %h : (tensor<?x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}
func.func private @wrapper(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                           %er: tensor<8xi32>) -> tensor<?x64xf32> {
  %y = func.call @exchange(%x, %ids, %w, %er)
      : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}
func.func @through_calls(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                         %er: tensor<8xi32>) -> tensor<?x64xf32> {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x64xf32>
  %c = arith.cmpi sgt, %t, %c0 : index
  // expected-note @+1 {{this scf.if decides whether it runs}}
  %r = scf.if %c -> tensor<?x64xf32> {
    // expected-error @+1 {{call of @wrapper, which issues collectives, under control flow that can differ between ranks: the scf.if condition depends on rank-local data}}
    %y = func.call @wrapper(%x, %ids, %w, %er)
        : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>) -> tensor<?x64xf32>
    scf.yield %y : tensor<?x64xf32>
  } else {
    scf.yield %x : tensor<?x64xf32>
  }
  return %r : tensor<?x64xf32>
}

// -----

// Tests that a collective outside any function is named as such.
%c = arith.constant 3 : index
// expected-error @+1 {{collective under control flow that can differ between ranks: it is outside any function}}
%n = moe.agree_count %c for phase_tokens : index
