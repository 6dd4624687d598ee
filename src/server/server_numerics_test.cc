// NaN / Inf in a model's weights through HTTP (issue 36): the forward pass's check stops the
// request, and the server answers 500 whose error message names the layer where non-finite
// values first appear (non-streaming), or an error event naming it then [DONE] (streaming);
// the server keeps serving /health.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>

#include "kvtier/test_model.h"
#include "server/server_test_util.h"
#include "test_model/test_model_test_util.h"

namespace kvtier {
namespace {

using nlohmann::json;

// The model at `path` served in process on a free port.
struct Served : testing::ModelFileServer {
  explicit Served(const std::string& path) : ModelFileServer(path, "poisoned") {}
};

struct Poison {
  const char* tensor;
  uint64_t index;
  float value;
  const char* layer;  // what the error must name
};

class ServerNumerics : public ::testing::TestWithParam<Poison> {};

TEST_P(ServerNumerics, NonFiniteWeightsAreA500NamingTheLayerAndAnErrorEventThenDone) {
  const Poison& p = GetParam();
  const std::string path = "/tmp/kvtier_server_numerics_" + std::to_string(::getpid()) + ".gguf";
  ASSERT_TRUE(WriteTestModel(testing::TinyF32ModelConfig(), path).ok());
  ASSERT_TRUE(testing::PlantF32(path, p.tensor, p.index, p.value).ok());
  const std::string named =
      std::string("non-finite values (NaN or Inf) first appear in ") + p.layer;
  {
    Served s(path);
    for (const char* route : {"/v1/completions", "/v1/chat/completions"}) {
      const bool chat = std::strcmp(route, "/v1/chat/completions") == 0;
      json body{{"max_tokens", 4}, {"temperature", 0}};
      if (chat) {
        body["messages"] = json::array({{{"role", "user"}, {"content", "hello"}}});
      } else {
        body["prompt"] = "hello";
      }
      // Non-streaming: 500, OpenAI's error shape, the layer named.
      httplib::Result r = s.Client().Post(route, body.dump(), "application/json");
      ASSERT_TRUE(r) << route;
      EXPECT_EQ(r->status, 500) << route << ": " << r->body;
      const json e = json::parse(r->body);
      ASSERT_TRUE(e.contains("error")) << r->body;
      EXPECT_EQ(e["error"]["type"], "server_error") << r->body;
      EXPECT_NE(e["error"]["message"].get<std::string>().find(named), std::string::npos)
          << route << ": " << r->body;

      // Streaming: an error event naming the layer, then [DONE] last.
      body["stream"] = true;
      r = s.Client().Post(route, body.dump(), "application/json");
      ASSERT_TRUE(r) << route;
      EXPECT_EQ(r->status, 200) << route << ": " << r->body;  // the stream began before it
      bool error_event = false;
      size_t pos = 0;
      while ((pos = r->body.find("data: ", pos)) != std::string::npos) {
        const size_t end = r->body.find("\n\n", pos);
        ASSERT_NE(end, std::string::npos) << r->body;
        const std::string data = r->body.substr(pos + 6, end - pos - 6);
        pos = end;
        if (data == "[DONE]") break;
        const json c = json::parse(data);
        if (!c.contains("error")) continue;
        error_event = true;
        EXPECT_NE(c["error"]["message"].get<std::string>().find(named), std::string::npos)
            << route << ": " << data;
      }
      EXPECT_TRUE(error_event) << route << ": " << r->body;
      EXPECT_TRUE(r->body.ends_with("data: [DONE]\n\n")) << route << ": " << r->body;
    }
    // The server keeps serving.
    httplib::Result h = s.Client().Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200) << h->body;
    httplib::Result m = s.Client().Get("/metrics");
    ASSERT_TRUE(m);
    EXPECT_NE(m->body.find("status=\"500\""), std::string::npos) << m->body;
  }
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Weights, ServerNumerics,
    ::testing::Values(
        Poison{"blk.1.ffn_down.weight", 7, std::numeric_limits<float>::quiet_NaN(), "layer 1"},
        Poison{"blk.0.attn_output.weight", 9, std::numeric_limits<float>::infinity(), "layer 0"}),
    [](const ::testing::TestParamInfo<Poison>& i) {
      return std::string(std::isnan(i.param.value) ? "NaN" : "Inf") + "In" +
             (i.param.layer[6] == '0' ? "Layer0" : "Layer1");
    });

}  // namespace
}  // namespace kvtier
