/* The two OpenBLAS entry points strata uses, as plain loops, for the binaries sent to the GPU
 * machine (tools/device/pack.sh). That machine has no OpenBLAS and its 36 MB library does not fit
 * the 64 MiB a device call may carry; on it only the CPU references of the tests use these. */
#include <cblas.h>

void cblas_sgemv(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE trans, const blasint m,
                 const blasint n, const float alpha, const float *a, const blasint lda, const float *x,
                 const blasint incx, const float beta, float *y, const blasint incy) {
  /* Row-major A[m][n] without transpose is column-major A^T with transpose: reduce to one case,
   * y = alpha * op(A) x + beta * y with A row-major. */
  const int row_major_notrans = (order == CblasRowMajor) == (trans == CblasNoTrans);
  const blasint rows = trans == CblasNoTrans ? m : n, cols = trans == CblasNoTrans ? n : m;
  for (blasint i = 0; i < rows; ++i) {
    float acc = 0.f;
    for (blasint j = 0; j < cols; ++j) {
      const float aij = row_major_notrans ? a[i * lda + j] : a[j * lda + i];
      acc += aij * x[j * incx];
    }
    y[i * incy] = alpha * acc + (beta == 0.f ? 0.f : beta * y[i * incy]);
  }
}

void openblas_set_num_threads(int threads) { (void)threads; }
