func.func @unagreed_trip_count(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                               %rank: tensor<8xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %t = tensor.dim %x, %c0 : tensor<?x64xf32>
  %local = arith.ceildivui %t, %c16 : index
  scf.for %i = %c0 to %local step %c1 {
    %rx, %rids, %rw, %h = moe.ep_dispatch %x, %ids, %w, %rank capacity = 64
      : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
        -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  }
  return
}
