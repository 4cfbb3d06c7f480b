# The CUDA templates on the CPU (label cuda; no GPU, no NVRTC): tests/cuda_emu generates each kernel's source with
# attn_spec_source, replaces its PTX wrapper section by tests/emu/ptx_<template>.h, compiles it with the C++
# compiler found here against the emulator (tests/emu/cuda_emu.cpp) and checks its output, unwritten outputs and
# counted I/O. Without a C++ compiler the project still configures and these tests exit 77 (skipped).
include(CheckLanguage)
check_language(CXX)
set(ATTN_EMU_CXX "")
set(ATTN_EMU_LIB "")
set(ATTN_EMU_LIB_ASAN "")
if(CMAKE_CXX_COMPILER)
  enable_language(CXX)
  set(CMAKE_CXX_STANDARD 17)
  set(CMAKE_CXX_STANDARD_REQUIRED ON)
  set(CMAKE_CXX_EXTENSIONS OFF)
  set(ATTN_EMU_CXX ${CMAKE_CXX_COMPILER})
  add_library(attn_cuda_emu STATIC ${CMAKE_CURRENT_LIST_DIR}/emu/cuda_emu.cpp)
  target_include_directories(attn_cuda_emu PRIVATE ${PROJECT_SOURCE_DIR}/templates)
  set(ATTN_EMU_LIB $<TARGET_FILE:attn_cuda_emu>)
  # the nightly sweep's build of the emulator, with AddressSanitizer where the compiler has it
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS -fsanitize=address)
  set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=address)
  check_cxx_source_compiles("int main() { return 0; }" ATTN_EMU_HAVE_ASAN)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
  if(ATTN_EMU_HAVE_ASAN)
    add_library(attn_cuda_emu_asan STATIC ${CMAKE_CURRENT_LIST_DIR}/emu/cuda_emu.cpp)
    target_include_directories(attn_cuda_emu_asan PRIVATE ${PROJECT_SOURCE_DIR}/templates)
    target_compile_options(attn_cuda_emu_asan PRIVATE -O1 -fsanitize=address -fno-omit-frame-pointer)
    set(ATTN_EMU_LIB_ASAN $<TARGET_FILE:attn_cuda_emu_asan>)
  endif()
endif()

add_executable(cuda_emu ${CMAKE_CURRENT_LIST_DIR}/cuda_emu.c)
target_include_directories(cuda_emu PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(cuda_emu PRIVATE attn_tuner m)
target_compile_definitions(cuda_emu PRIVATE ATTN_EMU_CXX="${ATTN_EMU_CXX}" ATTN_EMU_DIR="${CMAKE_CURRENT_LIST_DIR}/emu"
                           ATTN_EMU_LIB="${ATTN_EMU_LIB}" ATTN_EMU_LIB_ASAN="${ATTN_EMU_LIB_ASAN}")
if(TARGET attn_cuda_emu)
  add_dependencies(cuda_emu attn_cuda_emu)
endif()
if(TARGET attn_cuda_emu_asan)
  add_dependencies(cuda_emu attn_cuda_emu_asan)
endif()

set(ATTN_EMU_CACHE ${CMAKE_BINARY_DIR}/test-cache-emu)
file(MAKE_DIRECTORY ${ATTN_EMU_CACHE})
set(ATTN_EMU_ENV "ATTN_CACHE_DIR=${ATTN_EMU_CACHE}" "ATTN_DB=${ATTN_EMU_CACHE}/no-database.db" "ATTN_THREADS=1")

# name|arguments. CI (label cuda): every block shape of the tuner's flash space for a spread of (dtype, d, causal),
# the default spec of every d in each dtype, smallcache's tiles, lowrank's random and Taylor features; NaN and
# infinity in Q, K and V (the nan mode, as tests/cpu_nan.c) for the default spec of each algorithm and dtype at
# d = 16 and 64, causal and not (lowrank: one d a test, and Taylor features at d = 16).
set(ATTN_EMU_TESTS
    "flash_space_f16_d16|space flash f16 d=16 causal=0"
    "flash_space_f16_d128_causal|space flash f16 d=128 causal=1 stride=2"
    "flash_space_bf16_d80_causal|space flash bf16 d=80 causal=1 stride=2 offset=1"
    "flash_space_bf16_d256|space flash bf16 d=256 causal=0 stride=2"
    "flash_space_f32_d64_causal|space flash f32 d=64 causal=1"
    "flash_space_f32_d256|space flash f32 d=256 causal=0"
    "flash_defaults_f16|--quick defaults flash f16"
    "flash_defaults_bf16|--quick defaults flash bf16"
    "flash_defaults_f32|--quick defaults flash f32"
    "smallcache_space_f16_d64_causal|space smallcache f16 d=64 causal=1"
    "smallcache_space_f32_d128|space smallcache f32 d=128 causal=0"
    "smallcache_space_bf16_d256_causal|space smallcache bf16 d=256 causal=1 stride=2"
    "smallcache_defaults_bf16|--quick defaults smallcache bf16"
    "lowrank_space_f16_d16_causal|space lowrank f16 d=16 causal=1"
    "lowrank_space_f32_d32|space lowrank f32 d=32 causal=0"
    "lowrank_space_bf16_d64_causal|space lowrank bf16 d=64 causal=1"
    "lowrank_defaults_f32|--quick defaults lowrank f32")
foreach(dtype f16 bf16 f32)
  list(APPEND ATTN_EMU_TESTS
       "nan_flash_${dtype}|nan flash ${dtype} d=16,64"
       "nan_smallcache_${dtype}|nan smallcache ${dtype} d=16,64"
       "nan_lowrank_${dtype}_d16|nan lowrank ${dtype} d=16")
endforeach()
list(APPEND ATTN_EMU_TESTS "nan_lowrank_f32_d64|nan lowrank f32 d=64")
list(APPEND ATTN_EMU_TESTS
     "nan_lowrank_taylor_f32|nan lowrank f32 d=16 feature=taylor"
     "nan_lowrank_taylor_bf16|nan lowrank bf16 d=16 feature=taylor")
# nightly: every thread order and cp.async mode on whole spaces, and AddressSanitizer on every default spec; the whole
# of the spaces CI takes every other configuration of (the suite's time budget), lowrank's NaN cases at d=64
set(ATTN_EMU_NIGHTLY
    "nightly_flash_space_f16_d128_causal|space flash f16 d=128 causal=1"
    "nightly_flash_space_bf16_d80_causal|space flash bf16 d=80 causal=1"
    "nightly_flash_space_bf16_d256|space flash bf16 d=256 causal=0"
    "nightly_nan_lowrank_f16_d64|nan lowrank f16 d=64"
    "nightly_nan_lowrank_bf16_d64|nan lowrank bf16 d=64")
foreach(algo flash smallcache lowrank)
  foreach(dtype f16 bf16 f32)
    list(APPEND ATTN_EMU_NIGHTLY
         "nightly_${algo}_${dtype}_d64|--all-orders space ${algo} ${dtype} d=64 causal=0"
         "nightly_${algo}_${dtype}_d128_causal|--all-orders space ${algo} ${dtype} d=128 causal=1"
         "nightly_asan_${algo}_${dtype}|--asan defaults ${algo} ${dtype}")
  endforeach()
endforeach()
foreach(t ${ATTN_EMU_TESTS} ${ATTN_EMU_NIGHTLY})
  string(REPLACE "|" ";" parts "${t}")
  list(GET parts 0 name)
  list(GET parts 1 args)
  separate_arguments(args UNIX_COMMAND "${args}")
  if(name MATCHES "^nightly_")
    set(label nightly)
    set(timeout 7200)
  else()
    set(label cuda)
    set(timeout 600)
  endif()
  add_test(NAME emu_${name} COMMAND cuda_emu ${args})
  set_tests_properties(emu_${name} PROPERTIES LABELS ${label} TIMEOUT ${timeout} SKIP_RETURN_CODE 77
                       ENVIRONMENT "${ATTN_EMU_ENV}")
endforeach()
