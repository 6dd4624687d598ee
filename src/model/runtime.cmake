# kvtier_model: the model runtime (weights from GGUF, matrix products, the forward pass over the
# kv BatchCache with the fused attention kernels).
add_library(kvtier_model STATIC
  ${CMAKE_CURRENT_LIST_DIR}/matmul.cc ${CMAKE_CURRENT_LIST_DIR}/model.cc
  ${CMAKE_CURRENT_LIST_DIR}/forward.cc ${CMAKE_CURRENT_LIST_DIR}/ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/model_ref.cc ${CMAKE_CURRENT_LIST_DIR}/sampler.cc)
target_link_libraries(kvtier_model PUBLIC kvtier_gguf kvtier_kernels kvtier_kv kvtier_quant
  kvtier_base PRIVATE kvtier_simd PkgConfig::HWY)

kvtier_add_test(kvtier_model_runtime_test model
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/matmul_test.cc ${CMAKE_CURRENT_LIST_DIR}/model_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/sampler_test.cc
  LIBS kvtier_model kvtier_test_model)
