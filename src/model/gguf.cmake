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
