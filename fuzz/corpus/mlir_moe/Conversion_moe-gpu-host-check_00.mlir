func.func @host_load(%a: memref<4xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  gpu.launch blocks(%bx, %by, %bz) in (%x = %c1, %y = %c1, %z = %c1)
             threads(%tx, %ty, %tz) in (%u = %c1, %v = %c1, %w = %c1) {
    %inside = memref.load %a[%c0] : memref<4xf32>
    memref.store %inside, %a[%c0] : memref<4xf32>
    gpu.terminator
  }
  %v = memref.load %a[%c0] : memref<4xf32>
  return %v : f32
}
