/* A stand-in for libcuda with the entry points cortex.plugins.cuda.driver.LibCuda calls, built
 * by tests/cuda/test_cuda_libcuda.py to check the ctypes signatures and argument passing
 * without a GPU. "Device memory" is host memory; launches record what they were given. The
 * prototypes follow cuda.h (CUdeviceptr is 64-bit, handles are pointers). */
#include <stdint.h>
#include <string.h>

typedef int CUresult;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;

static char module_image[64];
static char function_name[64];
int fake_grid, fake_block, fake_shared, fake_cooperative, fake_launches, fake_attr_set, fake_synced;
int fake_occupancy_block;
uint64_t fake_arg0;
int32_t fake_arg1;

CUresult cuInit(unsigned flags) { return flags == 0 ? 0 : 1; }

CUresult cuGetErrorName(CUresult e, const char **s) { *s = e == 700 ? "CUDA_ERROR_ILLEGAL_ADDRESS" : "CUDA_ERROR_UNKNOWN"; return 0; }
CUresult cuGetErrorString(CUresult e, const char **s) { *s = e == 700 ? "an illegal memory access was encountered" : "unknown"; return 0; }

CUresult cuDeviceGet(int *dev, int ordinal) { if (ordinal != 0) return 101; *dev = 0; return 0; }

CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
  switch (attr) {
    case 1: *v = 1024; break;      /* max threads per block */
    case 8: *v = 49152; break;     /* shared per block */
    case 16: *v = 132; break;      /* SMs */
    case 38: *v = 52428800; break; /* L2 */
    case 39: *v = 2048; break;     /* threads per SM */
    case 75: *v = 9; break;
    case 76: *v = 0; break;
    case 81: *v = 233472; break;   /* shared per SM */
    case 95: *v = 1; break;        /* cooperative launch */
    case 97: *v = 232448; break;   /* shared per block, opt-in */
    default: return 1;
  }
  return dev == 0 ? 0 : 101;
}

CUresult cuDeviceGetName(char *name, int len, int dev) { strncpy(name, "Fake H200", (size_t)len); return 0; }

CUresult cuModuleLoadData(CUmodule *m, const void *image) {
  memcpy(module_image, image, 8);
  *m = module_image;
  return 0;
}

CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  if (m != module_image) return 400;
  strncpy(function_name, name, sizeof function_name - 1);
  *f = function_name;
  return 0;
}

CUresult cuModuleUnload(CUmodule m) { return 0; }

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction f, int block, size_t shared) {
  fake_occupancy_block = block;
  *n = shared > 100000 ? 1 : 3;
  return f == function_name ? 0 : 400;
}

CUresult cuFuncSetAttribute(CUfunction f, int attr, int value) { fake_attr_set = attr * 1000000 + value; return 0; }

static CUresult record(CUfunction f, unsigned gx, unsigned bx, unsigned shm, void **params, int coop) {
  if (f != function_name) return 400;
  fake_grid = (int)gx;
  fake_block = (int)bx;
  fake_shared = (int)shm;
  fake_cooperative = coop;
  fake_arg0 = *(uint64_t *)params[0];
  fake_arg1 = *(int32_t *)params[1];
  fake_launches++;
  return 0;
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shm, CUstream s, void **params, void **extra) {
  return record(f, gx, bx, shm, params, 0);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                   unsigned by, unsigned bz, unsigned shm, CUstream s, void **params) {
  return record(f, gx, bx, shm, params, 1);
}

CUresult cuCtxSynchronize(void) { fake_synced++; return fake_synced > 1 ? 700 : 0; }

CUresult cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t n) { memcpy((void *)(uintptr_t)dst, src, n); return 0; }
CUresult cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t n) { memcpy(dst, (const void *)(uintptr_t)src, n); return 0; }
