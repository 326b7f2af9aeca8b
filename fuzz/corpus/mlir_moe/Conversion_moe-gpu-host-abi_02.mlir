func.func private @helper(%x: memref<4xf32>) {
  return
}
