//===- CheckedSize.h - products and sums of sizes that detect overflow ---===//
//
// Private to the planners: every size they compute is a product or a sum
// of sizes, done here with llvm/Support/CheckedArithmetic.h. An overflow
// (or a negative operand) makes the whole computation invalid instead of
// wrapping into a wrong plan.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_DIALECT_MOE_ANALYSIS_CHECKEDSIZE_H
#define MOE_LIB_DIALECT_MOE_ANALYSIS_CHECKEDSIZE_H

#include "llvm/Support/CheckedArithmetic.h"

#include <cstdint>

namespace mlir::moe::detail {

class CheckedSize {
public:
  int64_t mul(int64_t a, int64_t b) {
    if (a < 0 || b < 0)
      return fail();
    if (std::optional<int64_t> r = llvm::checkedMul(a, b))
      return *r;
    return fail();
  }
  int64_t mul(int64_t a, int64_t b, int64_t c) { return mul(mul(a, b), c); }
  int64_t add(int64_t a, int64_t b) {
    if (a < 0 || b < 0)
      return fail();
    if (std::optional<int64_t> r = llvm::checkedAdd(a, b))
      return *r;
    return fail();
  }
  int64_t add(int64_t a, int64_t b, int64_t c) { return add(add(a, b), c); }
  /// False once any operation overflowed or saw a negative size.
  bool ok() const { return valid; }

private:
  int64_t fail() {
    valid = false;
    return 0;
  }
  bool valid = true;
};

/// ceil(a / b) for a >= 0, b > 0, without computing a + b - 1.
inline int64_t ceilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0); }

} // namespace mlir::moe::detail

#endif // MOE_LIB_DIALECT_MOE_ANALYSIS_CHECKEDSIZE_H
