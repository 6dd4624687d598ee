# kvtier_tokenizer: SPM and byte-level BPE tokenizers from GGUF metadata, stream decoding and
# built-in chat templates. Pre-tokenizer regexes run on PCRE2 (libpcre2-dev).
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
add_library(kvtier_tokenizer STATIC
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer.cc ${CMAKE_CURRENT_LIST_DIR}/tokenizer_segment.cc
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_text.cc ${CMAKE_CURRENT_LIST_DIR}/chat_template.cc)
target_link_libraries(kvtier_tokenizer PUBLIC kvtier_gguf kvtier_base PRIVATE PkgConfig::PCRE2)

kvtier_add_test(kvtier_model_tokenizer_test model
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/tokenizer_test.cc ${CMAKE_CURRENT_LIST_DIR}/tokenizer_vectors_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/chat_template_test.cc
  LIBS kvtier_tokenizer)
