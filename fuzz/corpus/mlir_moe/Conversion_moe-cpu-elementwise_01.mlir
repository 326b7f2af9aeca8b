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
