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
