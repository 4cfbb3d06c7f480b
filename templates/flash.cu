/* flash.cu: pipeline check only */
extern "C" __global__ void attn_kernel(attn_cuda_kargs a) {
  ATTN_CIO_DECL;
  extern __shared__ float sm[];
  float *o = (float *)a.o;
  sm[threadIdx.x] = a.scale;
  __syncthreads();
  if (blockIdx.x * blockDim.x + threadIdx.x < a.n) o[blockIdx.x * blockDim.x + threadIdx.x] = sm[threadIdx.x];
  ATTN_CIO_READ(1);
  ATTN_CIO_FLUSH(a);
}
