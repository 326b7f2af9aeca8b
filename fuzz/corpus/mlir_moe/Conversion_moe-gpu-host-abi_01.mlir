func.func @data_dependent(%x: memref<?x8xf32>, %n: memref<1xindex>) {
  %c0 = arith.constant 0 : index
  %rows = memref.load %n[%c0] : memref<1xindex>
  %a = memref.alloc(%rows) : memref<?x8xf32>
  "test.use"(%a) : (memref<?x8xf32>) -> ()
  return
}
