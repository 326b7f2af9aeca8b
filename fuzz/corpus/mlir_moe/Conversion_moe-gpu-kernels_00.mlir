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
