// Property test: long random sequences of append / trim / fork / merge / extract / filter /
// extend / take / batch append / convert / serialize against a simple float64 model, for
// every format and mixed K/V formats, on a small pool so that exhaustion happens too.
//
// The model keeps, per sequence and layer, the float64 values that were appended (truth), what
// the cache must return (the scalar reference's round trip, compared bit for bit) and an
// error bound per row. After every operation the touched sequences are compared with the
// model; periodically all of them, their invariants and the pool's reference count. At the
// end every block's reference count must be back to zero.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "gtest/gtest.h"
#include "kv/kv_test_util.h"
#include "kvtier/batch_cache.h"
#include "kvtier/kv_io.h"
#include "quant/test_formats.h"

namespace kvtier {
namespace {

using testing::MakePool;

// Error bound of one row of `x` stored in `f` (loose: the exact check is the strict one).
double RowTolerance(const Format& f, const double* x, size_t d) {
  auto range = [&](size_t a, size_t b, double* lo, double* hi, double* amax) {
    *lo = x[a], *hi = x[a], *amax = 0;
    for (size_t i = a; i < b; ++i) {
      *lo = std::min(*lo, x[i]);
      *hi = std::max(*hi, x[i]);
      *amax = std::max(*amax, std::fabs(x[i]));
    }
  };
  double tol = 0, lo, hi, amax;
  switch (f.kind) {
    case FormatKind::kF32:
      return 0;
    case FormatKind::kF16:
      range(0, d, &lo, &hi, &amax);
      return amax * 0x1p-11 + 0x1p-24;
    case FormatKind::kBF16:
      range(0, d, &lo, &hi, &amax);
      return amax * 0x1p-8;
    case FormatKind::kAffine: {
      // Half a step of rounding, plus scale and bias rounded to their dtype.
      const double eps = f.scale_dtype == DType::kBF16  ? 0x1p-8
                         : f.scale_dtype == DType::kF16 ? 0x1p-11
                                                        : 0x1p-24;
      for (size_t g = 0; g < d; g += f.group) {
        range(g, g + f.group, &lo, &hi, &amax);
        const double step = (hi - lo) / ((1 << f.bits) - 1);
        tol = std::max(tol, step + amax * eps * 4);
      }
      return tol;
    }
    case FormatKind::kQ8_0:
    case FormatKind::kQ4_0:
      for (size_t g = 0; g < d; g += 32) {
        range(g, g + 32, &lo, &hi, &amax);
        tol = std::max(tol, amax / (1 << (f.bits - 1)) + amax * 0x1p-9);
      }
      return tol;
    case FormatKind::kRot: {
      // Rotated rows: an element's error is at most the row's error norm, which on these rows
      // is sqrt(codebook MSE) (0.32 / 0.16 / 0.08 at 2 / 3 / 4 bits) times the row's norm;
      // about twice that as the bound.
      double norm2 = 0.0;
      for (size_t i = 0; i < d; ++i) norm2 += x[i] * x[i];
      return std::sqrt(norm2) * (f.bits == 2 ? 0.75 : f.bits == 3 ? 0.4 : 0.2);
    }
    case FormatKind::kChan:  // token-grouped K: not a row format, never drawn here
    case FormatKind::kChanMix:
      break;
  }
  return 0;
}

// One layer's K (or V) of a model sequence.
struct ModelRows {
  std::vector<double> truth;  // [tokens, heads, head_dim]
  std::vector<float> expect;  // what the cache returns, bit for bit
  std::vector<double> tol;    // [tokens * heads] accumulated error bound per row
};
struct ModelSeq {
  std::vector<ModelRows> k, v;  // [layers]
  uint32_t size() const { return k.empty() ? 0 : static_cast<uint32_t>(k[0].tol.size() / heads); }
  uint32_t heads = 1;
  void Truncate(uint32_t n, size_t d) {
    for (auto* side : {&k, &v}) {
      for (ModelRows& r : *side) {
        r.truth.resize(size_t{n} * heads * d);
        r.expect.resize(size_t{n} * heads * d);
        r.tol.resize(size_t{n} * heads);
      }
    }
  }
};

// Appends rows (source bytes of `dtype`) stored as `fmt` to the model.
void ModelAppend(ModelRows& m, const Format& fmt, DType dtype, const uint8_t* src, size_t rows,
                 size_t d) {
  std::vector<uint8_t> bytes(src, src + rows * d * DTypeSize(dtype));
  const std::vector<float> e = testing::RoundTrip(fmt, dtype, bytes, d);
  m.expect.insert(m.expect.end(), e.begin(), e.end());
  for (size_t r = 0; r < rows; ++r) {
    std::vector<double> x(d);
    for (size_t i = 0; i < d; ++i) x[i] = LoadAs(dtype, src, r * d + i);
    m.truth.insert(m.truth.end(), x.begin(), x.end());
    m.tol.push_back(RowTolerance(fmt, x.data(), d));
  }
}

// Re-encodes the model into another format, as ConvertSequence does (through f32).
void ModelConvert(ModelRows& m, const Format& fmt, size_t d) {
  std::vector<uint8_t> bytes(m.expect.size() * 4);
  if (!bytes.empty()) std::memcpy(bytes.data(), m.expect.data(), bytes.size());
  const std::vector<float> e = testing::RoundTrip(fmt, DType::kF32, bytes, d);
  for (size_t r = 0; r < m.tol.size(); ++r) {
    std::vector<double> x(m.expect.begin() + static_cast<std::ptrdiff_t>(r * d),
                          m.expect.begin() + static_cast<std::ptrdiff_t>((r + 1) * d));
    m.tol[r] += RowTolerance(fmt, x.data(), d);
  }
  m.expect = e;
}

class Harness {
 public:
  Harness(KvShape shape, Format kf, Format vf, uint32_t bt, uint32_t blocks, uint64_t seed)
      : shape_(shape), rng_(seed) {
    a_ = MakePool(shape, kf, vf, bt, testing::BlocksCapacity(shape, kf, vf, bt, blocks));
    // A second pool in other formats, for conversions (quantize on store and back).
    const Format other = kf.kind == FormatKind::kQ8_0 ? Format::Q4_0() : Format::Q8_0();
    b_ = MakePool(shape, other, Format::F16(), bt + 3, 1 << 24);
  }

  void Run(int n_ops) {
    for (int op = 0; op < n_ops && !::testing::Test::HasFatalFailure(); ++op) {
      Step(op);
      if (op % 64 == 63) CheckAll();
    }
    CheckAll();
    seqs_.clear();
    batches_.clear();
    others_.clear();
    for (const auto& p : {a_, b_}) {
      const PoolStats s = p->Stats();
      EXPECT_EQ(s.blocks_in_use, 0u);
      EXPECT_EQ(p->TotalRefs(), 0u);
      EXPECT_EQ(s.refcount_errors, 0u);
      for (uint64_t ob : s.owner_bytes) EXPECT_EQ(ob, 0u);
    }
    EXPECT_GT(failures_, 0) << "the pool never ran full: the test is too gentle";
  }

 private:
  struct Seq {
    SequenceCache cache;
    ModelSeq model;
  };
  struct Batch {
    BatchCache cache;
    std::vector<ModelSeq> rows;
  };

  size_t D() const { return shape_.head_dim; }
  uint32_t R(uint32_t n) { return static_cast<uint32_t>(rng_() % n); }

  ModelSeq EmptyModel() const {
    ModelSeq m;
    m.heads = shape_.n_kv_heads;
    m.k.resize(shape_.n_layers);
    m.v.resize(shape_.n_layers);
    return m;
  }

  void Compare(const SequenceCache& c, const ModelSeq& m, const char* where) {
    ASSERT_EQ(c.size(), m.size()) << where;
    ASSERT_TRUE(c.complete()) << where;
    for (uint32_t l = 0; l < shape_.n_layers; ++l) {
      const testing::Dense got = testing::ReadLayer(c, l, 0, c.size());
      ASSERT_TRUE(testing::SameBits(got.k, m.k[l].expect)) << where << " K layer " << l;
      ASSERT_TRUE(testing::SameBits(got.v, m.v[l].expect)) << where << " V layer " << l;
      for (const auto& [vals, rows] : {std::pair(&got.k, &m.k[l]), std::pair(&got.v, &m.v[l])}) {
        for (size_t i = 0; i < vals->size(); ++i) {
          ASSERT_LE(std::fabs((*vals)[i] - rows->truth[i]), rows->tol[i / D()] * 1.0001 + 1e-30)
              << where << " layer " << l << " value " << i;
        }
      }
    }
  }

  void CheckAll() {
    std::set<const void*> tables_a, tables_b;
    uint64_t refs_a = 0, refs_b = 0;
    auto count = [&](const SequenceCache& c) {
      ASSERT_TRUE(c.CheckInvariants().ok()) << c.CheckInvariants().ToString();
      if (c.pool() == a_ && tables_a.insert(c.table_identity()).second) refs_a += c.n_blocks();
      if (c.pool() == b_ && tables_b.insert(c.table_identity()).second) refs_b += c.n_blocks();
    };
    for (Seq& s : seqs_) {
      Compare(s.cache, s.model, "seq");
      count(s.cache);
    }
    for (Seq& s : others_) {
      Compare(s.cache, s.model, "converted seq");
      count(s.cache);
    }
    for (Batch& b : batches_) {
      ASSERT_EQ(b.cache.batch_size(), b.rows.size());
      for (size_t i = 0; i < b.rows.size(); ++i) {
        Compare(b.cache.row(i), b.rows[i], "batch row");
        count(b.cache.row(i));
      }
    }
    EXPECT_EQ(a_->TotalRefs(), refs_a);
    EXPECT_EQ(b_->TotalRefs(), refs_b);
  }

  // Random K/V for n tokens of one layer: [n, heads, head_dim].
  std::vector<uint8_t> Data(DType dt, uint32_t n) {
    return testing::RandomValues(dt, size_t{n} * shape_.n_kv_heads * D(), rng_(),
                                 0.5f + static_cast<float>(R(4)), static_cast<float>(R(3)) - 1.0f);
  }

  // Appends n tokens to a sequence, layers in random order; on failure nothing changed.
  void AppendTo(Seq& s, uint32_t n) {
    const DType dt = static_cast<DType>(R(3));
    std::vector<uint32_t> order(shape_.n_layers);
    for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng_);
    const uint32_t before = s.cache.size();
    for (size_t i = 0; i < order.size(); ++i) {
      const uint32_t l = order[i];
      const std::vector<uint8_t> k = Data(dt, n), v = Data(dt, n);
      Status st = s.cache.Append(l, dt, k.data(), v.data(), n);
      if (!st.ok()) {
        ASSERT_EQ(i, 0u) << "only the first layer of a pass allocates: " << st.ToString();
        ASSERT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
        ASSERT_EQ(s.cache.size(), before);
        ++failures_;
        return;
      }
      if (i + 1 < order.size()) {
        ASSERT_EQ(s.cache.size(), before);  // not complete yet
      }
      const size_t rows = size_t{n} * shape_.n_kv_heads;
      ModelAppend(s.model.k[l], a_->k_format(), dt, k.data(), rows, D());
      ModelAppend(s.model.v[l], a_->v_format(), dt, v.data(), rows, D());
    }
    ASSERT_EQ(s.cache.size(), before + n);
  }

  void BatchAppend(Batch& b) {
    const uint32_t rows = static_cast<uint32_t>(b.rows.size());
    const uint32_t S = 1 + R(a_->block_tokens() + 2);
    std::vector<uint32_t> valid(rows);
    for (uint32_t& v : valid) v = R(S + 1);
    const DType dt = static_cast<DType>(R(3));
    const size_t tok = size_t{shape_.n_kv_heads} * D() * DTypeSize(dt);
    for (uint32_t l = 0; l < shape_.n_layers; ++l) {
      const std::vector<uint8_t> k = Data(dt, S * rows), v = Data(dt, S * rows);
      Status st = b.cache.Append(l, dt, k.data(), v.data(), S, valid);
      if (!st.ok()) {
        ASSERT_EQ(l, 0u) << st.ToString();
        ASSERT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
        ++failures_;
        return;
      }
      for (uint32_t r = 0; r < rows; ++r) {
        const size_t n = size_t{valid[r]} * shape_.n_kv_heads;
        ModelAppend(b.rows[r].k[l], a_->k_format(), dt, k.data() + r * S * tok, n, D());
        ModelAppend(b.rows[r].v[l], a_->v_format(), dt, v.data() + r * S * tok, n, D());
      }
    }
  }

  void Step(int op) {
    const uint32_t bt = a_->block_tokens();
    switch (R(16)) {
      case 0:
      case 1:  // new sequence with some tokens
        if (seqs_.size() < 10) {
          seqs_.push_back({SequenceCache(a_), EmptyModel()});
          AppendTo(seqs_.back(), 1 + R(3 * bt));
        }
        break;
      case 2:
      case 3:  // append to a sequence
        if (!seqs_.empty()) AppendTo(seqs_[R(seqs_.size())], 1 + R(2 * bt + 2));
        break;
      case 4: {  // trim
        if (seqs_.empty()) break;
        Seq& s = seqs_[R(seqs_.size())];
        const uint32_t n = R(s.cache.size() + 3);
        Result<uint32_t> t = s.cache.Trim(n);
        ASSERT_TRUE(t.ok()) << t.status().ToString();
        ASSERT_EQ(*t, std::min(n, s.model.size()));
        s.model.Truncate(s.model.size() - *t, D());
        Compare(s.cache, s.model, "after trim");
        // Trimmed positions cannot be read, by range or by view.
        std::vector<float> one(size_t{shape_.n_kv_heads} * D());
        ASSERT_FALSE(s.cache.ReadDense(0, s.cache.size(), 1, DType::kF32, one.data(), one.data()).ok());
        ASSERT_EQ(s.cache.Row(0).length, s.cache.size());
        break;
      }
      case 5:  // fork
        if (!seqs_.empty() && seqs_.size() < 12) {
          Seq& s = seqs_[R(seqs_.size())];
          seqs_.push_back({s.cache.Fork(), s.model});
        }
        break;
      case 6:  // drop
        if (!seqs_.empty()) seqs_.erase(seqs_.begin() + R(seqs_.size()));
        break;
      case 7: {  // merge some sequences into a batch
        if (seqs_.empty() || batches_.size() >= 3) break;
        const uint32_t k = 1 + R(std::min<uint32_t>(4, static_cast<uint32_t>(seqs_.size())));
        std::vector<SequenceCache> rows;
        Batch b{BatchCache(a_), {}};
        for (uint32_t i = 0; i < k; ++i) {
          const uint32_t j = R(seqs_.size());
          rows.push_back(std::move(seqs_[j].cache));
          b.rows.push_back(std::move(seqs_[j].model));
          seqs_.erase(seqs_.begin() + j);
        }
        const uint64_t copied = a_->Stats().copied_bytes;
        Result<BatchCache> m = BatchCache::Merge(std::move(rows));
        ASSERT_TRUE(m.ok()) << m.status().ToString();
        ASSERT_EQ(a_->Stats().copied_bytes, copied);
        b.cache = std::move(*m);
        uint32_t longest = 0;
        for (const ModelSeq& r : b.rows) longest = std::max(longest, r.size());
        ASSERT_EQ(b.cache.size(), longest);
        for (size_t i = 0; i < b.rows.size(); ++i) {
          ASSERT_EQ(b.cache.left_padding(i), longest - b.rows[i].size());
          ASSERT_EQ(b.cache.offset(i), b.rows[i].size());
        }
        batches_.push_back(std::move(b));
        break;
      }
      case 8: {  // extract
        if (batches_.empty() || seqs_.size() >= 12) break;
        Batch& b = batches_[R(batches_.size())];
        if (b.rows.empty()) break;
        const uint32_t i = R(b.rows.size());
        Result<SequenceCache> x = b.cache.Extract(i);
        ASSERT_TRUE(x.ok());
        seqs_.push_back({std::move(*x), b.rows[i]});
        break;
      }
      case 9: {  // filter (reorder, duplicates, drops)
        if (batches_.empty()) break;
        Batch& b = batches_[R(batches_.size())];
        std::vector<size_t> idx;
        if (!b.rows.empty()) {
          for (uint32_t n = R(static_cast<uint32_t>(b.rows.size()) + 2); n > 0; --n) {
            idx.push_back(R(b.rows.size()));
          }
        }
        if (R(8) == 0) {  // an out-of-range index changes nothing
          std::vector<size_t> bad = idx;
          bad.push_back(b.rows.size());
          ASSERT_FALSE(b.cache.Filter(bad).ok());
        }
        ASSERT_TRUE(b.cache.Filter(idx).ok());
        std::vector<ModelSeq> kept;
        for (size_t i : idx) kept.push_back(b.rows[i]);
        b.rows = std::move(kept);
        break;
      }
      case 10: {  // extend one batch with another
        if (batches_.size() < 2) break;
        const uint32_t i = R(batches_.size());
        uint32_t j = R(batches_.size());
        if (i == j) j = (j + 1) % batches_.size();
        ASSERT_TRUE(batches_[i].cache.Extend(std::move(batches_[j].cache)).ok());
        for (ModelSeq& m : batches_[j].rows) batches_[i].rows.push_back(std::move(m));
        batches_.erase(batches_.begin() + j);
        break;
      }
      case 11:  // batch append (prefill chunk with ragged lengths, or decode)
        if (!batches_.empty()) BatchAppend(batches_[R(batches_.size())]);
        break;
      case 12: {  // batch trim, row trim, take
        if (batches_.empty()) break;
        Batch& b = batches_[R(batches_.size())];
        if (b.rows.empty()) {
          batches_.erase(batches_.begin() + (&b - batches_.data()));
          break;
        }
        const uint32_t n = R(bt + 3);
        if (R(3) == 0) {
          Result<uint32_t> t = b.cache.Trim(n);
          ASSERT_TRUE(t.ok());
          for (ModelSeq& m : b.rows) m.Truncate(m.size() - std::min(n, m.size()), D());
        } else if (R(2) == 0) {
          const uint32_t i = R(b.rows.size());
          ASSERT_TRUE(b.cache.TrimRow(i, n).ok());
          b.rows[i].Truncate(b.rows[i].size() - std::min(n, b.rows[i].size()), D());
        } else if (seqs_.size() < 12) {
          const uint32_t i = R(b.rows.size());
          Result<SequenceCache> x = b.cache.Take(i);
          ASSERT_TRUE(x.ok());
          seqs_.push_back({std::move(*x), std::move(b.rows[i])});
          b.rows.erase(b.rows.begin() + i);
        }
        break;
      }
      case 13: {  // convert to the other pool's formats (quantize on store) or back
        if (!others_.empty() && R(2) == 0) {
          const uint32_t i = R(others_.size());
          Result<SequenceCache> c = ConvertSequence(others_[i].cache, a_);
          if (!c.ok()) {
            ASSERT_EQ(c.status().code(), StatusCode::kResourceExhausted);
            ++failures_;
            break;
          }
          ModelSeq m = others_[i].model;
          for (auto& r : m.k) ModelConvert(r, a_->k_format(), D());
          for (auto& r : m.v) ModelConvert(r, a_->v_format(), D());
          others_.erase(others_.begin() + i);
          seqs_.push_back({std::move(*c), std::move(m)});
          Compare(seqs_.back().cache, seqs_.back().model, "converted back");
        } else if (!seqs_.empty() && others_.size() < 4) {
          Seq& s = seqs_[R(seqs_.size())];
          Result<SequenceCache> c = ConvertSequence(s.cache, b_, KvOwner::kPrefixCache);
          ASSERT_TRUE(c.ok()) << c.status().ToString();
          ModelSeq m = s.model;
          for (auto& r : m.k) ModelConvert(r, b_->k_format(), D());
          for (auto& r : m.v) ModelConvert(r, b_->v_format(), D());
          others_.push_back({std::move(*c), std::move(m)});
          Compare(others_.back().cache, others_.back().model, "converted");
          // A sequence of another pool cannot join a batch of this one.
          if (!batches_.empty()) {
            SequenceCache f = others_.back().cache.Fork();
            ASSERT_FALSE(batches_[0].cache.Add(std::move(f)).ok());
          }
        }
        break;
      }
      case 14: {  // serialize and read back
        if (seqs_.empty() || seqs_.size() >= 12) break;
        Seq& s = seqs_[R(seqs_.size())];
        Result<std::vector<uint8_t>> blob = SerializeSequence(s.cache, {});
        ASSERT_TRUE(blob.ok());
        Result<DeserializedSequence> d = DeserializeSequence(*blob, a_);
        if (!d.ok()) {
          ASSERT_EQ(d.status().code(), StatusCode::kResourceExhausted) << d.status().ToString();
          ++failures_;
          break;
        }
        seqs_.push_back({std::move(d->sequence), s.model});
        Compare(seqs_.back().cache, seqs_.back().model, "deserialized");
        break;
      }
      case 15:  // owner change
        if (!seqs_.empty()) {
          Seq& s = seqs_[R(seqs_.size())];
          ASSERT_TRUE(s.cache.SetOwner(static_cast<KvOwner>(R(kNumKvOwners))).ok());
        }
        break;
    }
    (void)op;
  }

  KvShape shape_;
  std::mt19937_64 rng_;
  std::shared_ptr<BlockPool> a_, b_;
  std::vector<Seq> seqs_;
  std::vector<Batch> batches_;
  std::vector<Seq> others_;  // sequences converted into pool b_
  int failures_ = 0;
};

// Every format (K = V), a few hundred operations each.
TEST(KvProperty, EveryFormat) {
  uint64_t seed = 1;
  for (const Format& f : testing::AllFormats()) {
    SCOPED_TRACE(f.spec());
    const KvShape shape{2, 2, f.group > 64 ? 128u : 64u};
    const uint32_t bt = std::array<uint32_t, 3>{2, 5, 16}[seed % 3];
    Harness h(shape, f, f, bt, 40 / bt + 8, ++seed);
    h.Run(500);
    if (HasFatalFailure()) return;
  }
}

// Mixed K/V formats, long runs.
TEST(KvProperty, MixedFormats) {
  const std::pair<Format, Format> pairs[] = {
      {Format::Q8_0(), Format::Q4_0()},
      {Format::BF16(), Format::Affine(4, 64, DType::kBF16)},
      {Format::F32(), Format::Q4_0()},
      {Format::Affine(2, 32, DType::kF32), Format::F16()},
      {Format::Affine(8, 64, DType::kF16), Format::Affine(3, 32, DType::kF16)},
  };
  uint64_t seed = 1000;
  for (const auto& [kf, vf] : pairs) {
    SCOPED_TRACE(kf.spec() + " / " + vf.spec());
    Harness h({3, 2, 64}, kf, vf, 4, 36, ++seed);
    h.Run(4000);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace kvtier
