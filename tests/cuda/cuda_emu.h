// A CPU stand-in for the parts of CUDA that the cortex renderer's CUDA C uses, so generated
// kernels can be run without a GPU (tests/cuda/emulate.py): every CUDA thread of a launch is an
// OS thread; __syncthreads() is a barrier per block, cooperative_groups' grid sync a barrier
// over the whole launch, and __shfl_xor_sync an exchange through a barrier per lane group.
// The shuffle checks its arguments against what a lane group must pass (mask = exactly the
// group's lanes of the warp, width = group size, 0 < offset < width) and aborts otherwise; a
// group whose lanes do not all reach the same shuffle deadlocks (the caller's timeout).
// No shared memory (__shared__) and no warp-synchronous behaviour beyond the shuffles.
#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <math.h>
#include <memory>
#include <mutex>
#include <stdint.h>
#include <thread>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict

struct cx_dim3 {
  unsigned x, y, z;
};
inline thread_local cx_dim3 threadIdx{0, 0, 0};
inline thread_local cx_dim3 blockIdx{0, 0, 0};
inline cx_dim3 blockDim{1, 1, 1};
inline cx_dim3 gridDim{1, 1, 1};

struct cx_group {
  std::barrier<> bar;
  unsigned char slot[32][8];
  explicit cx_group(int n) : bar(n) {}
};
inline std::mutex cx_mu;
inline std::map<std::pair<int, int>, std::unique_ptr<cx_group>> cx_groups;  // (lanes, group)
inline std::vector<std::unique_ptr<std::barrier<>>> cx_block_bars;
inline std::unique_ptr<std::barrier<>> cx_grid_bar;

inline cx_group& cx_get_group(int lanes, int group) {
  std::lock_guard<std::mutex> lock(cx_mu);
  auto& g = cx_groups[{lanes, group}];
  if (!g) g = std::make_unique<cx_group>(lanes);
  return *g;
}

template <class T>
T __shfl_xor_sync(unsigned mask, T value, int offset, int width) {
  unsigned tid = threadIdx.x;
  int lanes = __builtin_popcount(mask);
  unsigned warp_lane = tid % 32u;
  unsigned base = warp_lane - warp_lane % (unsigned)lanes;  // first lane of this thread's group
  unsigned want = lanes == 32 ? 0xffffffffu : (((1u << lanes) - 1u) << base);
  if (lanes != width || mask != want || offset <= 0 || offset >= width || blockDim.x % (unsigned)lanes) {
    std::fprintf(stderr, "bad shuffle: block %u thread %u mask %08x (want %08x) offset %d width %d block size %u\n",
                 blockIdx.x, tid, mask, want, offset, width, blockDim.x);
    std::abort();
  }
  int global = (int)(blockIdx.x * blockDim.x + tid);
  cx_group& g = cx_get_group(lanes, global / lanes);
  int lane = global % lanes;
  std::memcpy(g.slot[lane], &value, sizeof(T));
  g.bar.arrive_and_wait();
  T out;
  std::memcpy(&out, g.slot[lane ^ offset], sizeof(T));
  g.bar.arrive_and_wait();
  return out;
}

inline void __syncthreads() { cx_block_bars[blockIdx.x]->arrive_and_wait(); }

namespace cooperative_groups {
struct grid_group {
  void sync() { cx_grid_bar->arrive_and_wait(); }
};
inline grid_group this_grid() { return {}; }
}  // namespace cooperative_groups

template <class F>
void cx_launch(unsigned grid, unsigned block, F kernel) {
  blockDim = {block, 1, 1};
  gridDim = {grid, 1, 1};
  cx_groups.clear();
  cx_block_bars.clear();
  for (unsigned b = 0; b < grid; ++b) cx_block_bars.push_back(std::make_unique<std::barrier<>>(block));
  cx_grid_bar = std::make_unique<std::barrier<>>(grid * block);
  std::vector<std::thread> threads;
  for (unsigned b = 0; b < grid; ++b)
    for (unsigned t = 0; t < block; ++t)
      threads.emplace_back([=] {
        blockIdx = {b, 0, 0};
        threadIdx = {t, 0, 0};
        kernel();
      });
  for (auto& t : threads) t.join();
}
