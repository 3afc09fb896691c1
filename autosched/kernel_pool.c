/* The parallel launch of autosched's CPU kernels on OpenMP's thread pool.
 *
 * TVM's generated CPU code runs a parallel loop by calling the runtime through the
 * library's `__TVMBackendParallelLaunch` pointer with a lambda that does task `task_id`
 * of `penv->num_task`. Served by these two functions instead of TVM's own thread pool,
 * a kernel's parallel loop runs on the process's OpenMP threads: in a PyTorch process
 * the same threads (libgomp, one per process) that torch's intra-op parallelism and its
 * BLAS use, so no second set of threads spins on the cores torch needs next.
 * Built by autosched/kernel_pool.py with the C compiler; see that module.
 */
#include <omp.h>
#include <stdint.h>

typedef struct {
  void* sync_handle;
  int32_t num_task;
} TVMParallelGroupEnv;
typedef int (*FTVMParallelLambda)(int task_id, TVMParallelGroupEnv* penv, void* cdata);

static long long launches;

/* How many parallel loops this library has run (the tests read it). */
long long autosched_pool_launches(void) {
  return __atomic_load_n(&launches, __ATOMIC_RELAXED);
}

/* num_task == 0 means "as many as the pool has": the calling thread's OpenMP thread
 * count, which torch.set_num_threads sets. A loop started inside a parallel region (a
 * kernel called from an OpenMP thread) runs serially on that thread. */
int autosched_parallel_launch(FTVMParallelLambda flambda, void* cdata, int num_task) {
  int wanted = num_task > 0 ? num_task : omp_get_max_threads();
  int failed = 0;
  __atomic_add_fetch(&launches, 1, __ATOMIC_RELAXED);
  if (wanted <= 1 || omp_in_parallel()) {
    TVMParallelGroupEnv env = {0, 1};
    return flambda(0, &env, cdata);
  }
#pragma omp parallel num_threads(wanted)
  {
    TVMParallelGroupEnv env = {0, omp_get_num_threads()};
    if (flambda(omp_get_thread_num(), &env, cdata) != 0) {
#pragma omp atomic write
      failed = 1;
    }
  }
  return failed ? -1 : 0;
}

/* A barrier among the tasks of the running parallel loop (one OpenMP team). */
int autosched_parallel_barrier(int task_id, TVMParallelGroupEnv* penv) {
  (void)task_id;
  (void)penv;
#pragma omp barrier
  return 0;
}
