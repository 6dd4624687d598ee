// GGUF reader / writer: ggml type geometry, writer -> reader round trips of every value and
// tensor type, typed accessors, llama.cpp's vocab files, and corrupt images (hand-made faults,
// every truncation, byte flips) that must fail with a message naming the field, never crash.
#include "kvtier/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <random>

namespace kvtier {
namespace {

TEST(GgmlTypes, BlockGeometry) {
  struct Want {
    uint32_t id;
    const char* name;
    uint32_t values, bytes;
  };
  const Want want[] = {{0, "f32", 1, 4},       {1, "f16", 1, 2},       {30, "bf16", 1, 2},
                       {2, "q4_0", 32, 18},    {3, "q4_1", 32, 20},    {6, "q5_0", 32, 22},
                       {7, "q5_1", 32, 24},    {8, "q8_0", 32, 34},    {9, "q8_1", 32, 36},
                       {10, "q2_K", 256, 84},  {11, "q3_K", 256, 110}, {12, "q4_K", 256, 144},
                       {13, "q5_K", 256, 176}, {14, "q6_K", 256, 210}, {15, "q8_K", 256, 292},
                       {16, "iq2_xxs", 256, 66}, {20, "iq4_nl", 32, 18}, {23, "iq4_xs", 256, 136},
                       {34, "tq1_0", 256, 54}, {39, "mxfp4", 32, 17}, {42, "q2_0", 64, 18}};
  for (const Want& w : want) {
    const GgmlTypeInfo* t = FindGgmlType(w.id);
    ASSERT_NE(t, nullptr) << w.name;
    EXPECT_EQ(static_cast<uint32_t>(t->type), w.id);
    EXPECT_EQ(t->name, w.name);
    EXPECT_EQ(t->block_values, w.values) << w.name;
    EXPECT_EQ(t->block_bytes, w.bytes) << w.name;
    EXPECT_EQ(GgmlTypeName(w.id), w.name);
  }
  EXPECT_EQ(FindGgmlType(4), nullptr);   // removed q4_2
  EXPECT_EQ(FindGgmlType(31), nullptr);  // removed q4_0_4_4
  EXPECT_EQ(FindGgmlType(43), nullptr);  // past ggml's last type
  EXPECT_EQ(GgmlTypeName(99), "type 99");
  EXPECT_EQ(GgufValueTypeName(GgufValueType::kFloat64), "float64");
}

// Every value type, arrays of each, empty and nested arrays; tensors of every known type.
GgufWriter FullWriter() {
  GgufWriter w;
  w.SetString("general.architecture", "test");
  w.SetValue("v.u8", GgufUintValue(GgufValueType::kUint8, 255));
  w.SetValue("v.i8", GgufIntValue(GgufValueType::kInt8, -128));
  w.SetValue("v.u16", GgufUintValue(GgufValueType::kUint16, 65535));
  w.SetValue("v.i16", GgufIntValue(GgufValueType::kInt16, -32768));
  w.SetUint32("v.u32", 4000000000u);
  w.SetInt32("v.i32", -2000000000);
  w.SetUint64("v.u64", std::numeric_limits<uint64_t>::max());
  w.SetValue("v.i64", GgufIntValue(GgufValueType::kInt64, std::numeric_limits<int64_t>::min()));
  w.SetFloat32("v.f32", 0.1f);
  w.SetValue("v.f64", GgufFloatValue(GgufValueType::kFloat64, 1e300));
  w.SetBool("v.bool_t", true);
  w.SetBool("v.bool_f", false);
  w.SetString("v.str", std::string("a\0b\xc3\xa9", 5));
  w.SetString("v.empty", "");
  w.SetStringArray("a.str", {"x", "", "yz"});
  w.SetFloat32Array("a.f32", {1.5f, -2.0f});
  w.SetInt32Array("a.i32", {-1, 0, 7});
  w.SetValue("a.u8", GgufArrayValue(GgufValueType::kUint8,
                                    {GgufUintValue(GgufValueType::kUint8, 1),
                                     GgufUintValue(GgufValueType::kUint8, 200)}));
  w.SetValue("a.i64", GgufArrayValue(GgufValueType::kInt64,
                                     {GgufIntValue(GgufValueType::kInt64, -5)}));
  w.SetValue("a.f64", GgufArrayValue(GgufValueType::kFloat64,
                                     {GgufFloatValue(GgufValueType::kFloat64, 0.25)}));
  w.SetValue("a.bool", GgufArrayValue(GgufValueType::kBool, {GgufBoolValue(true)}));
  w.SetValue("a.empty", GgufArrayValue(GgufValueType::kUint32, {}));
  // [[["a", "b"], []], [["c"]]]
  w.SetValue("a.nested",
             GgufArrayValue(GgufValueType::kArray,
                            {GgufArrayValue(GgufValueType::kArray,
                                            {GgufArrayValue(GgufValueType::kString,
                                                            {GgufStringValue("a"),
                                                             GgufStringValue("b")}),
                                             GgufArrayValue(GgufValueType::kString, {})}),
                             GgufArrayValue(GgufValueType::kArray,
                                            {GgufArrayValue(GgufValueType::kString,
                                                            {GgufStringValue("c")})})}));
  std::mt19937 rng(7);
  for (uint32_t id : {0u, 1u, 2u, 3u, 6u, 7u, 8u, 9u, 10u, 11u, 12u, 13u, 14u, 15u, 30u}) {
    const GgmlTypeInfo* t = FindGgmlType(id);
    std::vector<uint64_t> shape = {t->block_values * 2, 3};
    if (id == 0) shape = {5};
    if (id == 1) shape = {3, 2, 2, 2};
    std::vector<uint8_t> bytes(shape.size() == 1   ? 5 * 4
                               : shape.size() == 4 ? 24 * 2
                                                   : 6 * size_t{t->block_bytes});
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    EXPECT_TRUE(w.AddTensor("t." + std::string(t->name), t->type, shape, bytes).ok());
  }
  return w;
}

const GgufArray& Arr(const GgufValue& v) {
  return *std::get<std::shared_ptr<GgufArray>>(v.v);
}

void CheckFull(const GgufFile& f) {
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(*f.GetString("general.architecture"), "test");
  EXPECT_EQ(*f.GetUint("v.u8"), 255u);
  EXPECT_EQ(f.Find("v.u8")->type, GgufValueType::kUint8);
  EXPECT_EQ(*f.GetInt("v.i8"), -128);
  EXPECT_EQ(f.Find("v.i8")->type, GgufValueType::kInt8);
  EXPECT_EQ(*f.GetUint("v.u16"), 65535u);
  EXPECT_EQ(*f.GetInt("v.i16"), -32768);
  EXPECT_EQ(*f.GetUint("v.u32"), 4000000000u);
  EXPECT_EQ(*f.GetInt("v.i32"), -2000000000);
  EXPECT_EQ(*f.GetUint("v.u64"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(*f.GetInt("v.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*f.GetFloat("v.f32"), static_cast<double>(0.1f));
  EXPECT_EQ(*f.GetFloat("v.f64"), 1e300);
  EXPECT_TRUE(*f.GetBool("v.bool_t"));
  EXPECT_FALSE(*f.GetBool("v.bool_f"));
  EXPECT_EQ(*f.GetString("v.str"), std::string("a\0b\xc3\xa9", 5));
  EXPECT_EQ(*f.GetString("v.empty"), "");
  EXPECT_EQ(*f.GetStringArray("a.str"), (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ(*f.GetFloatArray("a.f32"), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(*f.GetIntArray("a.i32"), (std::vector<int64_t>{-1, 0, 7}));
  EXPECT_EQ(*f.GetIntArray("a.u8"), (std::vector<int64_t>{1, 200}));
  EXPECT_EQ(*f.GetIntArray("a.i64"), (std::vector<int64_t>{-5}));
  EXPECT_EQ(*f.GetFloatArray("a.f64"), (std::vector<float>{0.25f}));
  EXPECT_EQ(Arr(*f.Find("a.bool")).elem_type, GgufValueType::kBool);
  EXPECT_TRUE(std::get<bool>(Arr(*f.Find("a.bool")).items.at(0).v));
  EXPECT_TRUE(f.GetIntArray("a.empty")->empty());
  const GgufArray& n = Arr(*f.Find("a.nested"));
  ASSERT_EQ(n.elem_type, GgufValueType::kArray);
  ASSERT_EQ(n.items.size(), 2u);
  const GgufArray& n0 = Arr(n.items[0]);
  ASSERT_EQ(n0.items.size(), 2u);
  EXPECT_EQ(Arr(n0.items[0]).elem_type, GgufValueType::kString);
  EXPECT_EQ(std::get<std::string>(Arr(n0.items[0]).items.at(1).v), "b");
  EXPECT_TRUE(Arr(n0.items[1]).items.empty());
  EXPECT_EQ(std::get<std::string>(Arr(Arr(n.items[1]).items.at(0)).items.at(0).v), "c");
}

TEST(Gguf, RoundTripEveryValueAndTensorType) {
  const GgufWriter w = FullWriter();
  const std::vector<uint8_t> img = w.Serialize();
  auto f = GgufFile::FromMemory(img, "mem.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  CheckFull(**f);
  EXPECT_EQ((*f)->alignment(), 32u);
  EXPECT_FALSE((*f)->Has("general.alignment"));
  ASSERT_EQ((*f)->tensors().size(), 15u);
  // Re-serialise the tensors from what was read: same bytes.
  GgufWriter again = FullWriter();
  for (const GgufTensor& t : (*f)->tensors()) {
    const GgmlTypeInfo* info = FindGgmlType(t.type);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(t.name, "t." + std::string(info->name));
    EXPECT_EQ(t.n_bytes, t.n_values / info->block_values * info->block_bytes);
    EXPECT_EQ((t.data - img.data()) % 32, 0);
    EXPECT_EQ(t.offset % 32, 0u);
    EXPECT_EQ((*f)->FindTensor(t.name), &t);
  }
  EXPECT_EQ((*f)->FindTensor("t.q4_K")->shape, (std::vector<uint64_t>{512, 3}));
  EXPECT_EQ((*f)->FindTensor("t.f16")->shape, (std::vector<uint64_t>{3, 2, 2, 2}));
  EXPECT_EQ((*f)->FindTensor("t.f32")->n_values, 5u);
  EXPECT_EQ((*f)->FindTensor("nope"), nullptr);
  // Tensor bytes as given.
  std::mt19937 rng(7);
  for (const GgufTensor& t : (*f)->tensors()) {
    for (uint64_t i = 0; i < t.n_bytes; ++i) {
      ASSERT_EQ(t.data[i], static_cast<uint8_t>(rng())) << t.name << " byte " << i;
    }
  }
}

TEST(Gguf, WriteFileOpenAndAlignment) {
  GgufWriter w = FullWriter();
  w.set_alignment(64);
  const std::string path = ::testing::TempDir() + "/kvtier_gguf_" + std::to_string(getpid()) + ".gguf";
  ASSERT_TRUE(w.WriteFile(path).ok());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  CheckFull(**f);
  EXPECT_EQ((*f)->alignment(), 64u);
  EXPECT_EQ(*(*f)->GetUint("general.alignment"), 64u);
  EXPECT_EQ((*f)->path(), path);
  const std::vector<uint8_t> img = w.Serialize();
  EXPECT_EQ((*f)->file_bytes(), img.size());
  auto mem = GgufFile::FromMemory(img, "img");
  ASSERT_TRUE(mem.ok());
  for (size_t i = 0; i < (*f)->tensors().size(); ++i) {
    const GgufTensor& t = (*f)->tensors()[i];
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 64, 0u) << t.name;
    EXPECT_EQ(t.offset, (*mem)->tensors()[i].offset);
    EXPECT_EQ(std::memcmp(t.data, (*mem)->tensors()[i].data, t.n_bytes), 0) << t.name;
  }
  std::filesystem::remove(path);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp." + std::to_string(getpid())));

  w.set_alignment(48);
  EXPECT_EQ(w.WriteFile(path).code(), StatusCode::kInvalidArgument);
  auto missing = GgufFile::Open(path);
  EXPECT_EQ(missing.status().code(), StatusCode::kIOError);
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
}

TEST(Gguf, TypedAccessorErrors) {
  const std::vector<uint8_t> img = FullWriter().Serialize();
  auto f = GgufFile::FromMemory(img, "acc.gguf");
  ASSERT_TRUE(f.ok());
  const GgufFile& g = **f;
  EXPECT_EQ(g.GetString("missing").status().code(), StatusCode::kNotFound);
  EXPECT_NE(g.GetString("missing").status().message().find("'missing'"), std::string::npos);
  const Status s = g.GetString("v.u32").status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "acc.gguf: key 'v.u32': expected string, got uint32");
  EXPECT_EQ(g.GetUint("v.i8").status().code(), StatusCode::kInvalidArgument);  // negative
  EXPECT_EQ(g.GetInt("v.u64").status().code(), StatusCode::kInvalidArgument);  // > int64
  EXPECT_FALSE(g.GetUint("v.i16").ok());
  EXPECT_EQ(*g.GetInt("v.u8"), 255);
  EXPECT_EQ(*g.GetFloat("v.i32"), -2000000000.0);
  EXPECT_EQ(g.GetFloat("v.str").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(g.GetBool("v.u8").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(g.GetStringArray("a.i32").status().message(),
            "acc.gguf: key 'a.i32': expected array of string, got array of int32");
  EXPECT_EQ(g.GetIntArray("a.str").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(g.GetFloatArray("a.nested").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*g.GetFloatArray("a.i32"), (std::vector<float>{-1.0f, 0.0f, 7.0f}));
}

TEST(Gguf, WriterRejectsBadTensors) {
  GgufWriter w;
  std::vector<uint8_t> q8(34 * 2);
  EXPECT_TRUE(w.AddTensor("a", GgmlType::kQ8_0, {32, 2}, q8).ok());
  EXPECT_EQ(w.AddTensor("a", GgmlType::kQ8_0, {32, 2}, q8).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddTensor("b", GgmlType::kQ8_0, {16, 4}, q8).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddTensor("c", GgmlType::kQ8_0, {32, 3}, q8).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddTensor("d", static_cast<GgmlType>(4), {32, 2}, q8).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddTensor("e", GgmlType::kF32, {}, {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddTensor("f", GgmlType::kF32, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddTensor("", GgmlType::kF32, {1}, std::vector<uint8_t>(4)).code(),
            StatusCode::kInvalidArgument);
}

std::filesystem::path VocabDir() {
  return std::filesystem::path(KVTIER_SOURCE_DIR) / ".." / "shared" / "testdata" / "vocab";
}

TEST(GgufVocab, Gpt2) {
  const auto path = VocabDir() / "ggml-vocab-gpt-2.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path << " (shared test data)";
  auto f = GgufFile::Open(path.string());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_TRUE(g.tensors().empty());
  EXPECT_EQ(*g.GetString("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(*g.GetString("tokenizer.ggml.pre"), "gpt-2");
  EXPECT_EQ(*g.GetString("general.architecture"), "gpt2");
  const auto tokens = g.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  ASSERT_EQ(tokens->size(), 50257u);
  EXPECT_EQ((*tokens)[0], "!");
  EXPECT_EQ((*tokens)[50256], "<|endoftext|>");
  EXPECT_EQ(g.GetIntArray("tokenizer.ggml.token_type")->size(), 50257u);
  const auto merges = g.GetStringArray("tokenizer.ggml.merges");
  ASSERT_EQ(merges->size(), 50000u);
  EXPECT_EQ((*merges)[2], "h e");
  EXPECT_EQ(*g.GetUint("tokenizer.ggml.eos_token_id"), 50256u);
  EXPECT_EQ(*g.GetUint("gpt2.block_count"), 12u);
  EXPECT_NEAR(*g.GetFloat("gpt2.attention.layer_norm_epsilon"), 1e-5, 1e-12);
}

TEST(GgufVocab, LlamaSpm) {
  const auto path = VocabDir() / "ggml-vocab-llama-spm.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path << " (shared test data)";
  auto f = GgufFile::Open(path.string());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const GgufFile& g = **f;
  EXPECT_EQ(*g.GetString("tokenizer.ggml.model"), "llama");
  const auto tokens = g.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens->size(), 32000u);
  EXPECT_EQ((*tokens)[1], "<s>");
  EXPECT_EQ(g.GetFloatArray("tokenizer.ggml.scores")->size(), 32000u);
  EXPECT_EQ((*g.GetIntArray("tokenizer.ggml.token_type"))[0], 2);
  EXPECT_EQ(*g.GetUint("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_TRUE(*g.GetBool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(*g.GetUint("llama.vocab_size"), 32000u);
}

}  // namespace
}  // namespace kvtier
