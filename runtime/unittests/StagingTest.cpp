//===- StagingTest.cpp - GPU layers' device buffers staged through host ----===//
//
// The into entries with a stream take device buffers: they must reach them
// only through libmoert_cuda's copies on that stream, and wait before they
// read. A fake libmoert_cuda (FakeDeviceCopies.cpp, $MOERT_CUDA_LIBRARY)
// keeps its "device" pages inaccessible except to its copies; the results
// must equal those of the same calls on host buffers (a null stream).
//
//===----------------------------------------------------------------------===//
#include "ChildProcess.h"
#include "FakeDevice.h"
#include "moert/moert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

using namespace moert::test;

namespace {
moert_memref2d memref2(void *p, int64_t rows, int64_t cols) {
  return moert_memref2d{p, p, 0, {rows, cols}, {cols, 1}};
}
moert_memref1d memref1(void *p, int64_t n) { return moert_memref1d{p, p, 0, {n}, {1}}; }

/// The fake device of the library under test, with its counters.
struct CountedDevice : FakeDevice {
  CountedDevice() : FakeDevice(MOERT_FAKE_DEVICE_LIBRARY) {}
  int (*copies)() = get<int (*)()>("fake_device_copies");
  int (*waits)() = get<int (*)()>("fake_device_waits");
};

/// Three tokens (hidden 4, top-2) to two experts on this one rank; the plan
/// receives its capacity, 5 rows: 3 arrive, 2 are masked.
struct Layer {
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<int32_t> ids = {0, 1, 1, 0, 0, 1};
  std::vector<float> weights = {0.25f, 0.75f, 0.5f, 0.5f, 1, 0};
  std::vector<int32_t> expertRank = {0, 0};
  std::vector<int64_t> plan = {5, 0, 0, 0, 0, 0, 0, 0, 0};
  static constexpr int64_t tokens = 3, hidden = 4, k = 2, rows = 5;
};
} // namespace

TEST(Staging, DeviceBuffersReachTheRuntimeOnlyThroughCopiesOnTheStream) {
  Ending e = runInChild([] {
    setenv("MOERT_CUDA_LIBRARY", MOERT_FAKE_DEVICE_LIBRARY, 1);
    if (moert_init("local", 2000) != 0)
      std::_Exit(2);
    CountedDevice dev;
    if (!dev.alloc || !dev.copy || !dev.copies || !dev.waits)
      std::_Exit(3);
    Layer l;
    auto planm = memref1(l.plan.data(), int64_t(l.plan.size()));

    // On host buffers (null stream).
    std::vector<float> rx(Layer::rows * Layer::hidden), rw(Layer::rows * Layer::k), y(12);
    std::vector<int32_t> rids(Layer::rows * Layer::k);
    auto xm = memref2(l.x.data(), Layer::tokens, Layer::hidden);
    auto im = memref2(l.ids.data(), Layer::tokens, Layer::k);
    auto wm = memref2(l.weights.data(), Layer::tokens, Layer::k);
    auto rm = memref1(l.expertRank.data(), 2);
    auto rxm = memref2(rx.data(), Layer::rows, Layer::hidden);
    auto ridm = memref2(rids.data(), Layer::rows, Layer::k);
    auto rwm = memref2(rw.data(), Layer::rows, Layer::k);
    int64_t handle = _mlir_ciface_moert_ep_dispatch_into_f32(&xm, &im, &wm, &rm, &planm, &rxm,
                                                             &ridm, &rwm, nullptr);
    std::vector<float> partial(rx);
    for (float &v : partial)
      v *= 3.0f;
    auto pm = memref2(partial.data(), Layer::rows, Layer::hidden);
    auto ym = memref2(y.data(), Layer::tokens, Layer::hidden);
    _mlir_ciface_moert_ep_combine_into_f32(&pm, handle, &ym, nullptr);
    if (dev.copies() != 0 || dev.waits() != 0)
      std::_Exit(4); // host buffers need no copies

    // The same on device buffers.
    void *stream = reinterpret_cast<void *>(0x5);
    dev.get<void (*)(void *)>("fake_device_expect_stream")(stream);
    float *dx = dev.upload(l.x), *dw = dev.upload(l.weights);
    int32_t *dids = dev.upload(l.ids), *drank = dev.upload(l.expertRank);
    auto *drx = static_cast<float *>(dev.alloc(rx.size() * 4));
    auto *drids = static_cast<int32_t *>(dev.alloc(rids.size() * 4));
    auto *drw = static_cast<float *>(dev.alloc(rw.size() * 4));
    xm = memref2(dx, Layer::tokens, Layer::hidden);
    im = memref2(dids, Layer::tokens, Layer::k);
    wm = memref2(dw, Layer::tokens, Layer::k);
    rm = memref1(drank, 2);
    rxm = memref2(drx, Layer::rows, Layer::hidden);
    ridm = memref2(drids, Layer::rows, Layer::k);
    rwm = memref2(drw, Layer::rows, Layer::k);
    handle = _mlir_ciface_moert_ep_dispatch_into_f32(&xm, &im, &wm, &rm, &planm, &rxm, &ridm,
                                                     &rwm, stream);
    if (dev.download(drx, rx.size()) != rx || dev.download(drids, rids.size()) != rids ||
        dev.download(drw, rw.size()) != rw)
      std::_Exit(5);
    float *dp = dev.upload(partial), *dy = static_cast<float *>(dev.alloc(y.size() * 4));
    pm = memref2(dp, Layer::rows, Layer::hidden);
    ym = memref2(dy, Layer::tokens, Layer::hidden);
    _mlir_ciface_moert_ep_combine_into_f32(&pm, handle, &ym, stream);
    if (dev.download(dy, y.size()) != y)
      std::_Exit(6);
    // Inputs in, results out (with their masked rows), and a wait before
    // each read of what came in.
    if (dev.copies() < 4 + 6 + 1 + 1 || dev.waits() < 2)
      std::_Exit(7);
    // The host run: every received row once; the masked rows zero / -1.
    for (int64_t r = 3; r < Layer::rows; ++r)
      if (rx[size_t(r * Layer::hidden)] != 0 || rids[size_t(r * Layer::k)] != -1)
        std::_Exit(8);
    for (size_t i = 0; i < y.size(); ++i)
      if (y[i] != 3.0f * l.x[i])
        std::_Exit(9);
  });
  EXPECT_TRUE(e.exited && e.code == 0) << e.describe();
}

TEST(Staging, TheAllGatherExchangeFillsBlocksOnHostAndDeviceAlike) {
  Ending e = runInChild([] {
    setenv("MOERT_CUDA_LIBRARY", MOERT_FAKE_DEVICE_LIBRARY, 1);
    if (moert_init("local", 2000) != 0)
      std::_Exit(2);
    CountedDevice dev;
    Layer l;
    // The decode layout: one rank's block of 5 slots, 3 tokens in it.
    std::vector<int64_t> plan = {5, 5, 5, 0, 1, 0, 0, 0, 0};
    auto planm = memref1(plan.data(), int64_t(plan.size()));
    const int64_t rows = 5, h = Layer::hidden, k = Layer::k;
    struct Run {
      std::vector<float> x, w, returned;
      std::vector<int32_t> ids;
    };
    auto run = [&](void *stream) {
      Run out;
      const bool device = stream != nullptr;
      auto place = [&](auto &host) { return device ? dev.upload(host) : host.data(); };
      std::vector<float> rx(rows * h), rw(rows * k), partial(rows * h), back(rows * h);
      std::vector<int32_t> rids(rows * k);
      for (size_t i = 0; i < partial.size(); ++i)
        partial[i] = float(i) + 0.5f;
      float *px = place(l.x), *pw = place(l.weights), *prx = place(rx), *prw = place(rw);
      float *pp = place(partial), *pback = place(back);
      int32_t *pids = place(l.ids), *prank = place(l.expertRank), *prids = place(rids);
      auto xm = memref2(px, Layer::tokens, h), im = memref2(pids, Layer::tokens, k);
      auto wm = memref2(pw, Layer::tokens, k);
      auto rm = memref1(prank, 2);
      auto rxm = memref2(prx, rows, h), ridm = memref2(prids, rows, k);
      auto rwm = memref2(prw, rows, k);
      int64_t handle = _mlir_ciface_moert_ep_gather_into_f32(&xm, &im, &wm, &rm, &planm, &rxm,
                                                             &ridm, &rwm, stream);
      auto pm = memref2(pp, rows, h), bm = memref2(pback, rows, h);
      _mlir_ciface_moert_ep_return_into_f32(&pm, handle, &bm, stream);
      auto fetch = [&](auto *p, auto &host) {
        return device ? dev.download(p, host.size()) : host;
      };
      out.x = fetch(prx, rx);
      out.ids = fetch(prids, rids);
      out.w = fetch(prw, rw);
      out.returned = fetch(pback, back);
      if (out.returned != partial) // one rank: its only block comes back
        std::_Exit(10);
      return out;
    };
    Run host = run(nullptr);
    if (dev.copies() != 0 || dev.waits() != 0)
      std::_Exit(4);
    dev.get<void (*)(void *)>("fake_device_expect_stream")(reinterpret_cast<void *>(0x5));
    Run device = run(reinterpret_cast<void *>(0x5));
    if (device.x != host.x || device.ids != host.ids || device.w != host.w)
      std::_Exit(5);
    // Token t at row t with its global ids; rows 3 and 4 masked.
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < h; ++c)
        if (host.x[size_t(r * h + c)] != (r < 3 ? l.x[size_t(r * h + c)] : 0.0f))
          std::_Exit(6);
      for (int64_t j = 0; j < k; ++j) {
        const size_t i = size_t(r * k + j);
        if (host.ids[i] != (r < 3 ? l.ids[i] : -1) || host.w[i] != (r < 3 ? l.weights[i] : 0))
          std::_Exit(7);
      }
    }
  });
  EXPECT_TRUE(e.exited && e.code == 0) << e.describe();
}

TEST(Staging, Fp8CodesForTheExpertsLandOnHostAndDeviceAlike) {
  Ending e = runInChild([] {
    setenv("MOERT_CUDA_LIBRARY", MOERT_FAKE_DEVICE_LIBRARY, 1);
    if (moert_init("local", 2000) != 0)
      std::_Exit(2);
    CountedDevice dev;
    // Three tokens of hidden 32 (one UE8M0 group), top-2 to this rank's two
    // experts; the plan (quantization 2) receives its capacity, 5 rows.
    const int64_t tokens = 3, h = 32, k = 2, rows = 5;
    std::vector<float> x(tokens * h);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = (float(i % 7) - 3.0f) * (i < size_t(h) ? 0.01f : 3.5f);
    std::vector<int32_t> ids = {0, 1, 1, 0, 0, 1}, expertRank = {0, 0};
    std::vector<float> weights = {0.25f, 0.75f, 0.5f, 0.5f, 1, 0};
    std::vector<int64_t> plan = {5, 0, 0, 2, 1, 0, 0, 0, 0};
    auto planm = memref1(plan.data(), int64_t(plan.size()));
    struct Run {
      std::vector<uint8_t> codes;
      std::vector<float> scales, w;
      std::vector<int32_t> ids;
    };
    auto run = [&](void *stream) {
      const bool device = stream != nullptr;
      auto place = [&](auto &host) { return device ? dev.upload(host) : host.data(); };
      std::vector<uint8_t> codes(rows * h, 0xAA);
      std::vector<float> scales(rows, -1.0f), rw(rows * k, -1.0f), y(tokens * h);
      std::vector<int32_t> rids(rows * k, 9);
      float *px = place(x), *pw = place(weights), *pscales = place(scales), *prw = place(rw);
      uint8_t *pcodes = place(codes);
      int32_t *pids = place(ids), *prank = place(expertRank), *prids = place(rids);
      auto xm = memref2(px, tokens, h), im = memref2(pids, tokens, k);
      auto wm = memref2(pw, tokens, k);
      auto rm = memref1(prank, 2);
      auto cm = memref2(pcodes, rows, h), sm = memref2(pscales, rows, 1);
      auto ridm = memref2(prids, rows, k), rwm = memref2(prw, rows, k);
      int64_t handle = _mlir_ciface_moert_ep_dispatch_fp8_into_f32(&xm, &im, &wm, &rm, &planm, &cm,
                                                                   &sm, &ridm, &rwm, stream);
      // The combine takes the layer's f32 partial rows.
      std::vector<float> partial(rows * h, 1.0f);
      float *pp = place(partial), *py = place(y);
      auto pm = memref2(pp, rows, h), ym = memref2(py, tokens, h);
      _mlir_ciface_moert_ep_combine_into_f32(&pm, handle, &ym, stream);
      auto fetch = [&](auto *p, auto &host) {
        return device ? dev.download(p, host.size()) : host;
      };
      return Run{fetch(pcodes, codes), fetch(pscales, scales), fetch(prw, rw), fetch(prids, rids)};
    };
    Run host = run(nullptr);
    if (dev.copies() != 0 || dev.waits() != 0)
      std::_Exit(4);
    dev.get<void (*)(void *)>("fake_device_expect_stream")(reinterpret_cast<void *>(0x5));
    Run device = run(reinterpret_cast<void *>(0x5));
    if (device.codes != host.codes || device.scales != host.scales || device.w != host.w ||
        device.ids != host.ids)
      std::_Exit(5);
    // Row t holds token t's codes and its group's scale 2^(byte - 127) as
    // the runtime's quantization gives them; the masked rows codes and
    // scales 0, ids -1.
    for (int64_t r = 0; r < rows; ++r) {
      uint8_t want[32] = {}, byte = 0;
      if (r < tokens && moert_quantize_row(2, &x[size_t(r * h)], h, want, &byte) != 0)
        std::_Exit(6);
      const float scale = r < tokens ? std::ldexp(1.0f, int(byte) - 127) : 0.0f;
      if (!std::equal(want, want + h, host.codes.begin() + r * h) ||
          host.scales[size_t(r)] != scale || (r >= tokens && host.ids[size_t(r * k)] != -1))
        std::_Exit(7);
    }
  });
  EXPECT_TRUE(e.exited && e.code == 0) << e.describe();
}

TEST(Staging, TheAllGatherExchangeRefusesWhatTheLayersMapCannotTake) {
  struct Case {
    std::vector<int32_t> expertRank;
    std::vector<int64_t> plan;
    const char *expected;
  } cases[] = {
      {{0, 1}, {5, 5, 5, 0, 1, 0, 0, 0, 0}, "expert_rank[1] = 1, but a layer that maps global ids"},
      {{0, 0}, {5, 0, 0, 0, 1, 0, 0, 0, 0}, "needs the decode layout (plan slots > 0)"},
      {{0, 0}, {5, 5, 2, 0, 1, 0, 0, 0, 0}, "3 tokens but the plan allows at most 2"},
  };
  for (const Case &c : cases) {
    Ending e = runInChild([&] {
      if (moert_init("local", 2000) != 0)
        std::_Exit(2);
      Layer l;
      std::vector<int64_t> plan = c.plan;
      std::vector<int32_t> expertRank = c.expertRank, rids(5 * Layer::k);
      std::vector<float> rx(5 * Layer::hidden), rw(5 * Layer::k);
      auto xm = memref2(l.x.data(), Layer::tokens, Layer::hidden);
      auto im = memref2(l.ids.data(), Layer::tokens, Layer::k);
      auto wm = memref2(l.weights.data(), Layer::tokens, Layer::k);
      auto rm = memref1(expertRank.data(), 2);
      auto planm = memref1(plan.data(), int64_t(plan.size()));
      const int64_t rows = plan[2] ? plan[2] : 5;
      auto rxm = memref2(rx.data(), rows, Layer::hidden);
      auto ridm = memref2(rids.data(), rows, Layer::k), rwm = memref2(rw.data(), rows, Layer::k);
      _mlir_ciface_moert_ep_gather_into_f32(&xm, &im, &wm, &rm, &planm, &rxm, &ridm, &rwm, nullptr);
    });
    EXPECT_TRUE(e.exited && e.code == 1) << e.describe();
    EXPECT_NE(e.stderrText.find("moert: rank 0: error: "), std::string::npos) << e.describe();
    EXPECT_NE(e.stderrText.find(c.expected), std::string::npos) << e.describe();
  }
}

TEST(Staging, MaskedBf16RowsOfOddWidthAreFilledOnTheDevice) {
  // Hidden 3 in bf16: the masked rows after 3 received ones start 2 bytes
  // off a word, where a 32-bit device memset cannot start (the fake aborts
  // on it, as the driver fails). The NCCL all-gather fills the same way.
  Ending e = runInChild([] {
    setenv("MOERT_CUDA_LIBRARY", MOERT_FAKE_DEVICE_LIBRARY, 1);
    if (moert_init("local", 2000) != 0)
      std::_Exit(2);
    CountedDevice dev;
    const int64_t tokens = 3, h = 3, k = 1, rows = 5;
    std::vector<uint16_t> x = {1, 2, 3, 4, 5, 6, 7, 8, 9}, rx(rows * h, 0x7777);
    std::vector<int32_t> ids = {0, 1, 0}, expertRank = {0, 0}, rids(rows * k, 7);
    std::vector<float> weights = {1, 1, 1}, rw(rows * k, 7);
    std::vector<int64_t> plan = {rows, 0, 0, 0, 0, 0, 0, 0, 0};
    void *stream = reinterpret_cast<void *>(0x5);
    dev.get<void (*)(void *)>("fake_device_expect_stream")(stream);
    uint16_t *dx = dev.upload(x), *drx = dev.upload(rx);
    int32_t *dids = dev.upload(ids), *drank = dev.upload(expertRank), *drids = dev.upload(rids);
    float *dw = dev.upload(weights), *drw = dev.upload(rw);
    auto xm = memref2(dx, tokens, h), im = memref2(dids, tokens, k), wm = memref2(dw, tokens, k);
    auto rm = memref1(drank, 2), planm = memref1(plan.data(), int64_t(plan.size()));
    auto rxm = memref2(drx, rows, h), ridm = memref2(drids, rows, k);
    auto rwm = memref2(drw, rows, k);
    _mlir_ciface_moert_ep_dispatch_into_bf16(&xm, &im, &wm, &rm, &planm, &rxm, &ridm, &rwm, stream);
    std::vector<uint16_t> got = dev.download(drx, rx.size());
    std::vector<int32_t> gotIds = dev.download(drids, rids.size());
    for (int64_t i = tokens * h; i < rows * h; ++i)
      if (got[size_t(i)] != 0)
        std::_Exit(3);
    if (gotIds[3] != -1 || gotIds[4] != -1)
      std::_Exit(4);
    std::vector<uint16_t> sent(got.begin(), got.begin() + tokens * h);
    std::sort(sent.begin(), sent.end());
    if (sent != x) // each token's row once
      std::_Exit(5);
  });
  EXPECT_TRUE(e.exited && e.code == 0) << e.describe();
}
