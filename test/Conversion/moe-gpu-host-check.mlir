// RUN: moe-opt %s --moe-gpu-host-check -verify-diagnostics

// Tests that a load left on the host (outside every gpu.launch) is an error at the load, and
// that the same load inside a launch is not.
func.func @host_load(%a: memref<4xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  gpu.launch blocks(%bx, %by, %bz) in (%x = %c1, %y = %c1, %z = %c1)
             threads(%tx, %ty, %tz) in (%u = %c1, %v = %c1, %w = %c1) {
    %inside = memref.load %a[%c0] : memref<4xf32>
    memref.store %inside, %a[%c0] : memref<4xf32>
    gpu.terminator
  }
  // expected-error @+1 {{moe-gpu-host-check: host code would access a device buffer here}}
  %v = memref.load %a[%c0] : memref<4xf32>
  return %v : f32
}
