// Scratch (issue 22, 2026-12-07; docs/gemm.md "One process is one draw"): one product, M x K @ K x N
// (NN), four ways on the same arrays in one process, alternated in 10 ms bursts after 2 ms of
// warm-up, 40 rounds, a 50 ms pause with both threads spinning after each: oneDNN on its own
// two OpenMP threads ("own2"), the columns and the rows split by hand over two threads of
// oneDNN on one thread each, and lazytrace (lt::from_blob over the same arrays, matmul + sync).
// Medians of the rounds, as GFLOP/s; lazytrace's kernel choice on stderr. Built and run as:
//   g++ -O2 -std=c++20 -I include same_buffers.cpp -o same_buffers build-bench/src/liblazytrace.a \
//       -ldnnl -lopenblas -lxsmm -fopenmp -lpthread -ldl
//   for i in 1 2 3 4; do ./same_buffers 64 512 2048; done
// scratch: oneDNN's own 2-thread sgemm against halves on two threads, same buffers
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <algorithm>
#include <functional>
#include <lazytrace/lazytrace.h>
using Clock = std::chrono::steady_clock;
static double secs(Clock::time_point t0){return std::chrono::duration<double>(Clock::now()-t0).count();}
std::atomic<int> go{0}, done{0}; std::function<void()> job; std::atomic<bool> quit{false};
std::atomic<int> parked{0};
void helper(){ int seen=0; while(!quit){ if(parked.load()){parked.wait(1);} int g=go.load(std::memory_order_acquire); if(g!=seen){seen=g; job(); done.fetch_add(1,std::memory_order_release);} } }
int main(int argc,char**argv){
  long M=atol(argv[1]),K=atol(argv[2]),N=atol(argv[3]);
  float*A=(float*)aligned_alloc(64,M*K*4),*B=(float*)aligned_alloc(64,K*N*4),*C=(float*)aligned_alloc(64,M*N*4),*C2=(float*)aligned_alloc(64,M*N*4);
  for(long i=0;i<M*K;i++)A[i]=(i%7)*0.1f; for(long i=0;i<K*N;i++)B[i]=(i%5)*0.1f; for(long i=0;i<M*N;i++)C[i]=C2[i]=0;
  std::thread h(helper);
  lt::Tensor la=lt::from_blob(A,{M,K},lt::float32,nullptr), lb=lt::from_blob(B,{K,N},lt::float32,nullptr);
  auto ltcall=[&]{ parked=1; lt::Tensor c=lt::matmul(la,lb); lt::sync({c}); };
  auto pair=[&](std::function<void()> a,std::function<void()> b){ job=b; int d0=done.load(); go.fetch_add(1,std::memory_order_release); a(); while(done.load(std::memory_order_acquire)==d0){} };
  auto own=[&]{ parked=1; omp_set_num_threads(2); dnnl_sgemm('N','N',M,N,K,1.f,A,K,B,N,0.f,C,N); };
  auto cols=[&]{ if(parked){parked=0;parked.notify_all();} omp_set_num_threads(1); long h2=N/2; pair([&]{dnnl_sgemm('N','N',M,h2,K,1.f,A,K,B,N,0.f,C,N);},[&]{dnnl_sgemm('N','N',M,N-h2,K,1.f,A,K,B+h2,N,0.f,C+h2,N);}); };
  auto rows=[&]{ if(parked){parked=0;parked.notify_all();} omp_set_num_threads(1); long h2=M/2; pair([&]{dnnl_sgemm('N','N',h2,N,K,1.f,A,K,B,N,0.f,C,N);},[&]{dnnl_sgemm('N','N',M-h2,N,K,1.f,A+h2*K,K,B+h2*0,N,0.f,C+h2*N,N);}); };
  auto red=[&]{ if(parked){parked=0;parked.notify_all();} omp_set_num_threads(1); long h2=K/2; pair([&]{dnnl_sgemm('N','N',M,N,h2,1.f,A,K,B,N,0.f,C,N);},[&]{dnnl_sgemm('N','N',M,N,K-h2,1.f,A+h2,K,B+h2*N,N,0.f,C2,N);}); for(long i=0;i<M*N;i++)C[i]+=C2[i]; };
  std::function<void()> ways[]={own,cols,rows,ltcall}; const char*names[]={"own2","cols","rows","lt"};
  std::vector<double> t[4];
  for(int r=0;r<40;r++) for(int i=0;i<4;i++){ int w=(i+r)%4; auto t0=Clock::now(); while(secs(t0)<2e-3) ways[w](); long n=0; t0=Clock::now(); while(secs(t0)<1e-2){ways[w]();n++;} t[w].push_back(secs(t0)/n);
     if(parked){parked=0;parked.notify_all();} auto p0=Clock::now(); pair([&]{while(secs(p0)<0.05){}},[&]{while(secs(p0)<0.05){}}); }
  double fl=2.0*M*N*K;
  for(int w=0;w<4;w++){ std::sort(t[w].begin(),t[w].end()); printf("%s %.1f GFLOP/s\n",names[w],fl/t[w][t[w].size()/2]*1e-9);} 
  fprintf(stderr,"%s",lt::debug::kernel_choices().c_str()); quit=true; go++; h.join();
}
