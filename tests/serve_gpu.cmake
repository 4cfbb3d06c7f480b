# The serving layouts' async forms and GPU tuning. The CUDA queueing itself (copy, launch and event on the caller's
# stream, the host tables read before the call returns, no wait) is tests/emu_serve.cmake's cuda_serve_fake.
# serve_async: on the CPU the async forms are the synchronous calls (same bits; errors name the async call).
add_executable(serve_async ${CMAKE_CURRENT_LIST_DIR}/serve_async.c)
target_link_libraries(serve_async PRIVATE attn_core m)
add_test(NAME serve_async COMMAND serve_async)
set_tests_properties(serve_async PROPERTIES LABELS cpu TIMEOUT 120
                     ENVIRONMENT "ATTN_CACHE_DIR=${ATTN_TEST_CACHE};ATTN_DB=${ATTN_TEST_CACHE}/no-database.db;ATTN_THREADS=2")
