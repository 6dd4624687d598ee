// Status / Result behaviour, including the propagation macros.
#include "kvtier/status.h"

#include <gtest/gtest.h>

#include <memory>

namespace kvtier {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument("x: expected even, got " + std::to_string(x));
  return x / 2;
}

Result<int> Quarter(int x) {
  KVTIER_ASSIGN_OR_RETURN(int h, Half(x));
  KVTIER_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckPositive(int x) {
  if (x <= 0) return Status::OutOfRange("x must be > 0");
  return Status::OK();
}

Status Both(int a, int b) {
  KVTIER_RETURN_IF_ERROR(CheckPositive(a));
  KVTIER_RETURN_IF_ERROR(CheckPositive(b));
  return Status::OK();
}

TEST(Status, CodesAndMessages) {
  EXPECT_TRUE(Status::OK().ok());
  EXPECT_EQ(Status::OK().ToString(), "OK");
  const Status s = Status::Corruption("crc mismatch in block 7");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.ToString(), "Corruption: crc mismatch in block 7");
}

TEST(Status, ResultCarriesValueOrError) {
  Result<int> r = Quarter(12);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 3);
  Result<int> e = Quarter(6);  // 6 -> 3 -> odd
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e.status().message(), "x: expected even, got 3");
}

TEST(Status, ReturnIfErrorStopsAtFirstFailure) {
  EXPECT_TRUE(Both(1, 2).ok());
  EXPECT_EQ(Both(-1, 2).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(Both(1, 0).code(), StatusCode::kOutOfRange);
}

TEST(Status, ResultFromOkStatusIsAnInternalError) {
  Result<int> r(Status::OK());
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(Status, ResultHoldsMoveOnlyTypes) {
  Result<std::unique_ptr<int>> r(std::make_unique<int>(5));
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 5);
}

}  // namespace
}  // namespace kvtier
