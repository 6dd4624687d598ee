# kvtier_gguf: GGUF v3 reader (validating, mmap) and writer. kvtier_test_model: seeded random
# llama / qwen2 / qwen3 models written as GGUF (`kvtier make-test-model`).
add_library(kvtier_gguf STATIC
  ${CMAKE_CURRENT_LIST_DIR}/gguf.cc ${CMAKE_CURRENT_LIST_DIR}/gguf_reader.cc
  ${CMAKE_CURRENT_LIST_DIR}/gguf_writer.cc)
target_link_libraries(kvtier_gguf PUBLIC kvtier_base)

kvtier_add_test(kvtier_model_gguf_test model
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/gguf_test.cc ${CMAKE_CURRENT_LIST_DIR}/gguf_corrupt_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/gguf_fuzz.cc
          ${CMAKE_CURRENT_LIST_DIR}/gguf_fuzz_replay_test.cc
  LIBS kvtier_gguf)

add_library(kvtier_test_model STATIC ${CMAKE_CURRENT_LIST_DIR}/test_model.cc)
target_link_libraries(kvtier_test_model PUBLIC kvtier_gguf kvtier_quant kvtier_base)

kvtier_add_test(kvtier_model_test_model_test model
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_test.cc
  LIBS kvtier_test_model)

# libFuzzer target (clang only): the reader sources are compiled into it with coverage.
#   cmake -B build/fuzz -DCMAKE_CXX_COMPILER=clang++-14 -DKVTIER_BUILD_FUZZ=ON
#   build/fuzz/src/model/kvtier_gguf_fuzz -max_len=4096 CORPUS_DIR
option(KVTIER_BUILD_FUZZ "Build libFuzzer targets (clang only)" OFF)
if(KVTIER_BUILD_FUZZ AND CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  add_executable(kvtier_gguf_fuzz
    ${CMAKE_CURRENT_LIST_DIR}/gguf_fuzz.cc ${CMAKE_CURRENT_LIST_DIR}/gguf.cc
    ${CMAKE_CURRENT_LIST_DIR}/gguf_reader.cc ${CMAKE_CURRENT_LIST_DIR}/gguf_writer.cc)
  target_compile_options(kvtier_gguf_fuzz PRIVATE -g -fsanitize=fuzzer,address,undefined)
  target_link_options(kvtier_gguf_fuzz PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(kvtier_gguf_fuzz PRIVATE kvtier_base)
endif()
