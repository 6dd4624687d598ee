// JsonMatcher: see json_matcher.h.
#include "constrain/json_matcher.h"

#include <algorithm>
#include <cstring>

namespace kvtier::constrain {
namespace {

enum FrameKind : uint8_t { kValue = 0, kObj = 1, kArr = 2, kStr = 3, kNum = 4, kLit = 5 };
// Object phases.
enum : uint8_t { kOStart = 0, kOKey = 1, kOColon = 2, kOAfter = 3, kONext = 4 };
// Array phases.
enum : uint8_t { kAStart = 0, kAAfter = 1, kANext = 2 };
// Number phases.
enum : uint8_t {
  kNStart = 0, kNSign, kNZero, kNInt, kNDot, kNFrac, kNE, kNESign, kNExp
};
constexpr uint32_t kInf = 0xffffffffu;
constexpr size_t kMaxStacks = 64;
constexpr int kMaxForkDepth = 32;

bool IsWs(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }
bool IsDigit(uint8_t b) { return b >= '0' && b <= '9'; }
bool IsHex(uint8_t b) {
  return IsDigit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}
bool Accepting(uint8_t phase) {
  return phase == kNZero || phase == kNInt || phase == kNFrac || phase == kNExp;
}

enum class Lex { kReject, kEnd, kRaw, kEscape };

// One byte of a string body (after the opening quote). *new_char: b starts a character.
Lex LexString(JsonFrame& f, uint8_t b, bool* new_char) {
  *new_char = false;
  if (f.u8need > 0) {
    if (b < f.u8lo || b > f.u8hi) return Lex::kReject;
    --f.u8need;
    f.u8lo = 0x80;
    f.u8hi = 0xbf;
    return Lex::kRaw;
  }
  if (f.esc == 1) {
    if (b == 'u') {
      f.esc = 6;
      f.hex = 0;
      return Lex::kEscape;
    }
    if (f.low_due == 0 && (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' ||
                           b == 'n' || b == 'r' || b == 't')) {
      f.esc = 0;
      return Lex::kEscape;
    }
    return Lex::kReject;
  }
  if (f.esc >= 2) {
    if (!IsHex(b)) return Lex::kReject;
    const uint32_t d = IsDigit(b) ? b - '0' : (b | 0x20) - 'a' + 10;
    f.hex = f.hex * 16 + d;
    --f.esc;
    if (f.esc == 5) {  // one digit: a due low surrogate starts with D
      if (f.low_due != 0 && f.hex != 0xd) return Lex::kReject;
    } else if (f.esc == 4) {  // two digits: the high byte decides surrogate pairing
      const bool low = f.hex >= 0xdc && f.hex <= 0xdf;
      if (low != (f.low_due != 0)) return Lex::kReject;
    } else if (f.esc == 2) {
      f.esc = 0;
      if (f.low_due != 0) {
        f.low_due = 0;
      } else if (f.hex >= 0xd800 && f.hex <= 0xdbff) {
        f.low_due = 1;
      }
      f.hex = 0;
    }
    return Lex::kEscape;
  }
  if (f.low_due != 0) {
    if (b != '\\') return Lex::kReject;
    f.esc = 1;
    return Lex::kEscape;
  }
  if (b == '"') return Lex::kEnd;
  if (b < 0x20) return Lex::kReject;
  *new_char = true;
  if (b == '\\') {
    f.esc = 1;
    return Lex::kEscape;
  }
  if (b < 0x80) return Lex::kRaw;
  // RFC 3629 lead bytes and the range of the first continuation byte.
  uint8_t need = 0, lo = 0x80, hi = 0xbf;
  if (b >= 0xc2 && b <= 0xdf) {
    need = 1;
  } else if (b == 0xe0) {
    need = 2, lo = 0xa0;
  } else if ((b >= 0xe1 && b <= 0xec) || b == 0xee || b == 0xef) {
    need = 2;
  } else if (b == 0xed) {
    need = 2, hi = 0x9f;
  } else if (b == 0xf0) {
    need = 3, lo = 0x90;
  } else if (b >= 0xf1 && b <= 0xf3) {
    need = 3;
  } else if (b == 0xf4) {
    need = 3, hi = 0x8f;
  } else {
    return Lex::kReject;
  }
  f.u8need = need;
  f.u8lo = lo;
  f.u8hi = hi;
  return Lex::kRaw;
}

// Counts a character against [min, max]; the count saturates where it no longer matters.
bool CountUp(uint32_t* count, uint32_t min, uint32_t max) {
  if (max != kInf) {
    if (*count >= max) return false;
    ++*count;
  } else if (*count < min) {
    ++*count;
  }
  return true;
}

}  // namespace

JsonGrammar JsonGrammar::Base() {
  JsonGrammar g;
  g.nodes.resize(4);
  const char* lits[] = {"true", "false", "null"};
  for (int i = 0; i < 3; ++i) {
    g.nodes[i + 1].kind = NodeKind::kLiteral;
    g.nodes[i + 1].literal = lits[i];
  }
  return g;
}

std::shared_ptr<const JsonGrammar> JsonGrammar::AnyValue(bool object_only) {
  JsonGrammar g = Base();
  if (object_only) {
    JsonNode o;
    o.kind = NodeKind::kObject;
    g.nodes.push_back(o);
    g.root = static_cast<uint32_t>(g.nodes.size() - 1);
  }
  return std::make_shared<const JsonGrammar>(std::move(g));
}

bool JsonStack::operator==(const JsonStack& o) const {
  return ws_run == o.ws_run && frames.size() == o.frames.size() &&
         (frames.empty() ||
          std::memcmp(frames.data(), o.frames.data(), frames.size() * sizeof(JsonFrame)) == 0);
}

JsonMatcher::JsonMatcher(std::shared_ptr<const JsonGrammar> grammar, MatchLimits limits)
    : g_(std::move(grammar)), lim_(limits) {
  PushValue(JsonStack{}, g_->root, &stacks_);
}

void JsonMatcher::PushValue(JsonStack s, uint32_t node, std::vector<JsonStack>* out,
                            int depth) const {
  const JsonNode& n = g_->nodes[node];
  if (n.kind == NodeKind::kAnyOf) {
    if (depth >= kMaxForkDepth) return;
    for (uint32_t alt : n.alts) PushValue(s, alt, out, depth + 1);
    return;
  }
  JsonFrame f{};
  f.node = node;
  f.kind = kValue;
  s.frames.push_back(f);
  out->push_back(std::move(s));
}

void JsonMatcher::Step(JsonStack s, uint8_t b, std::vector<JsonStack>* out) const {
  const bool ws = IsWs(b);
  // Structural whitespace: counted against the cap.
  auto take_ws = [&]() {
    ++s.ws_run;
    if (lim_.max_ws_run != 0 && s.ws_run > lim_.max_ws_run) return;
    out->push_back(std::move(s));
  };
  if (s.frames.empty()) {
    if (ws) take_ws();
    return;
  }
  JsonFrame& f = s.frames.back();
  const JsonNode& n = g_->nodes[f.node];
  switch (f.kind) {
    case kValue: {
      if (ws) return take_ws();
      s.ws_run = 0;
      NodeKind k = n.kind;
      if (k == NodeKind::kAny) {
        if (b == '{') k = NodeKind::kObject;
        else if (b == '[') k = NodeKind::kArray;
        else if (b == '"') k = NodeKind::kString;
        else if (b == '-' || IsDigit(b)) k = NodeKind::kNumber;
        else if (b == 't') f.node = 1, k = NodeKind::kLiteral;
        else if (b == 'f') f.node = 2, k = NodeKind::kLiteral;
        else if (b == 'n') f.node = 3, k = NodeKind::kLiteral;
        else return;
      }
      switch (k) {
        case NodeKind::kObject:
          if (b != '{') return;
          f.kind = kObj;
          f.phase = kOStart;
          out->push_back(std::move(s));
          return;
        case NodeKind::kArray:
          if (b != '[') return;
          f.kind = kArr;
          f.phase = kAStart;
          out->push_back(std::move(s));
          return;
        case NodeKind::kString:
          if (b != '"') return;
          f.kind = kStr;
          out->push_back(std::move(s));
          return;
        case NodeKind::kNumber:
        case NodeKind::kInteger:
          f.kind = kNum;
          f.phase = kNStart;
          return Step(std::move(s), b, out);
        case NodeKind::kLiteral:
          f.kind = kLit;
          f.count = 0;
          return Step(std::move(s), b, out);
        default:
          return;
      }
    }
    case kLit: {
      const std::string& lit = g_->nodes[f.node].literal;
      if (f.count >= lit.size() || static_cast<uint8_t>(lit[f.count]) != b) return;
      if (!ws) s.ws_run = 0;
      if (++f.count == lit.size()) s.frames.pop_back();
      out->push_back(std::move(s));
      return;
    }
    case kNum: {
      const bool integer = n.kind == NodeKind::kInteger;
      uint8_t next = 0xff;
      switch (f.phase) {
        case kNStart:
          if (b == '-') next = kNSign;
          [[fallthrough]];
        case kNSign:
          if (b == '0') next = kNZero;
          else if (b >= '1' && b <= '9') next = kNInt;
          break;
        case kNInt:
          if (IsDigit(b)) next = kNInt;
          [[fallthrough]];
        case kNZero:
          if (!integer && b == '.') next = kNDot;
          else if (!integer && (b == 'e' || b == 'E')) next = kNE;
          break;
        case kNDot:
          if (IsDigit(b)) next = kNFrac;
          break;
        case kNFrac:
          if (IsDigit(b)) next = kNFrac;
          else if (b == 'e' || b == 'E') next = kNE;
          break;
        case kNE:
          if (b == '+' || b == '-') next = kNESign;
          else if (IsDigit(b)) next = kNExp;
          break;
        case kNESign:
        case kNExp:
          if (IsDigit(b)) next = kNExp;
          break;
      }
      if (next != 0xff) {
        if (next == f.phase) {
          const uint32_t cap = next == kNInt    ? lim_.max_int_digits
                               : next == kNFrac ? lim_.max_frac_digits
                                                : lim_.max_exp_digits;
          ++f.count;
          if (cap != 0 && f.count > cap) return;
        } else {
          f.count = 1;
        }
        f.phase = next;
        s.ws_run = 0;
        out->push_back(std::move(s));
        return;
      }
      if (!Accepting(f.phase)) return;
      s.frames.pop_back();  // the number ended: the byte belongs to what follows
      return Step(std::move(s), b, out);
    }
    case kStr: {
      const uint32_t min = n.kind == NodeKind::kString ? n.min_length : 0;
      const uint32_t max = n.kind == NodeKind::kString ? n.max_length : kInf;
      bool new_char;
      const Lex lx = LexString(f, b, &new_char);
      if (lx == Lex::kReject) return;
      if (lx == Lex::kEnd) {
        if (f.count < min) return;
        s.frames.pop_back();
      } else if (new_char && !CountUp(&f.count, min, max)) {
        return;
      }
      if (!ws) s.ws_run = 0;
      out->push_back(std::move(s));
      return;
    }
    case kObj: {
      const bool typed = n.kind == NodeKind::kObject;
      const size_t np = typed ? n.prop_names.size() : 0;
      const uint64_t all = np == 64 ? ~uint64_t{0} : (uint64_t{1} << np) - 1;
      const uint32_t additional = typed ? n.additional : 0;
      if (f.phase == kOKey) {
        bool new_char;
        const Lex lx = LexString(f, b, &new_char);
        if (lx == Lex::kReject) return;
        if (lx == Lex::kEnd) {
          uint64_t exact = 0;
          for (size_t i = 0; i < np; ++i) {
            if ((f.cand >> i & 1) && n.prop_names[i].size() == f.count) exact = uint64_t{1} << i;
          }
          if (exact == 0 && additional == kNoNode) return;
          if (exact & f.seen) return;  // duplicate key
          f.cand = exact;
          f.count = 0;
          f.phase = kOColon;
        } else if (f.cand != 0) {
          if (lx == Lex::kEscape) {
            f.cand = 0;  // escaped keys are matched as unknown keys
          } else {
            uint64_t keep = 0;
            for (size_t i = 0; i < np; ++i) {
              if ((f.cand >> i & 1) && f.count < n.prop_names[i].size() &&
                  static_cast<uint8_t>(n.prop_names[i][f.count]) == b) {
                keep |= uint64_t{1} << i;
              }
            }
            f.cand = keep;
            ++f.count;
          }
          if (f.cand == 0) f.count = 0;
        }
        if (f.cand == 0 && additional == kNoNode) return;
        if (!ws) s.ws_run = 0;
        out->push_back(std::move(s));
        return;
      }
      if (ws) return take_ws();
      s.ws_run = 0;
      switch (f.phase) {
        case kOStart:
        case kONext:
          if (b == '"') {
            f.phase = kOKey;
            f.count = 0;
            f.cand = all & ~f.seen;
            if (f.cand == 0 && additional == kNoNode) return;
            out->push_back(std::move(s));
          } else if (b == '}' && f.phase == kOStart && (n.required & ~f.seen) == 0) {
            s.frames.pop_back();
            out->push_back(std::move(s));
          }
          return;
        case kOColon: {
          if (b != ':') return;
          uint32_t value = additional;
          if (f.cand != 0) {
            const int i = __builtin_ctzll(f.cand);
            value = n.prop_nodes[static_cast<size_t>(i)];
            f.seen |= f.cand;
          }
          f.cand = 0;
          f.phase = kOAfter;
          return PushValue(std::move(s), value, out);
        }
        case kOAfter:
          if (b == ',') {
            if ((all & ~f.seen) == 0 && additional == kNoNode) return;  // no key left
            f.phase = kONext;
            out->push_back(std::move(s));
          } else if (b == '}' && (n.required & ~f.seen) == 0) {
            s.frames.pop_back();
            out->push_back(std::move(s));
          }
          return;
        default:
          return;
      }
    }
    case kArr: {
      const bool typed = n.kind == NodeKind::kArray;
      const uint32_t items = typed ? n.items : 0;
      const uint32_t min = typed ? n.min_items : 0;
      const uint32_t max = typed ? n.max_items : kInf;
      if (ws) return take_ws();
      if (f.phase == kAAfter) {
        s.ws_run = 0;
        if (b == ',') {
          if (max != kInf && f.count >= max) return;
          f.phase = kANext;
          out->push_back(std::move(s));
        } else if (b == ']' && f.count >= min) {
          s.frames.pop_back();
          out->push_back(std::move(s));
        }
        return;
      }
      if (b == ']') {
        if (f.phase != kAStart || min > 0) return;
        s.ws_run = 0;
        s.frames.pop_back();
        out->push_back(std::move(s));
        return;
      }
      if (!CountUp(&f.count, min, max)) return;
      f.phase = kAAfter;
      std::vector<JsonStack> pushed;
      PushValue(std::move(s), items, &pushed);
      for (JsonStack& p : pushed) Step(std::move(p), b, out);
      return;
    }
    default:
      return;
  }
}

bool JsonMatcher::FeedByte(uint8_t b) {
  next_.clear();
  for (const JsonStack& s : stacks_) Step(s, b, &next_);
  if (next_.size() > 1) {  // alternatives that met again are one
    std::vector<JsonStack> uniq;
    for (JsonStack& s : next_) {
      if (uniq.size() >= kMaxStacks) break;
      if (std::find(uniq.begin(), uniq.end(), s) == uniq.end()) uniq.push_back(std::move(s));
    }
    next_ = std::move(uniq);
  }
  stacks_.swap(next_);
  return !stacks_.empty();
}

bool JsonMatcher::Feed(std::string_view bytes) {
  for (char c : bytes) {
    if (!FeedByte(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

bool JsonMatcher::CanEnd() const {
  for (const JsonStack& s : stacks_) {
    if (s.frames.empty()) return true;
    if (s.frames.size() == 1 && s.frames[0].kind == kNum && Accepting(s.frames[0].phase)) {
      return true;
    }
  }
  return false;
}

bool JsonMatcher::Done() const {
  if (stacks_.empty()) return false;
  for (const JsonStack& s : stacks_) {
    if (!s.frames.empty()) return false;
  }
  return true;
}

void JsonMatcher::StateKey(std::string* out) const {
  for (const JsonStack& s : stacks_) {
    const uint32_t head[2] = {static_cast<uint32_t>(s.frames.size()),
                              lim_.max_ws_run == 0 ? 0u : s.ws_run};
    out->append(reinterpret_cast<const char*>(head), sizeof(head));
    out->append(reinterpret_cast<const char*>(s.frames.data()), s.frames.size() * sizeof(JsonFrame));
  }
}

}  // namespace kvtier::constrain
