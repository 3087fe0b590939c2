// sindex_driver: runs one of learnedidx's benchmark operation streams against SIndex.
//
// SIndex (Wang et al., APSys 2020) as published in casys-kaist/sia, directory original/,
// is a header-only C++ library with no program of its own that reads our streams.  This
// program reads a stream file written by learnedidx.workloads.streamfile, bulk-loads the
// load phase (sort + build, as SIndex's constructor needs sorted keys), runs the run phase
// on one worker thread, timing both phases itself, and prints one JSON report per phase.
// Read results are folded into the same CRC-32 digest as learnedidx's runner computes, so
// they can be compared with every other peer's.
//
//   sindex_driver [--mode per-op|batch] [--fix-exited] [--check] STREAM_FILE
//   sindex_driver --version
//
// --fix-exited clears SIndex's config.exited after construction.  As released, exited
// starts true and is never cleared, so rcu_barrier() never waits for the worker and the
// background compaction can free buffers the worker still reads.
//
// A run is timed until SIndex has compacted what its background thread deferred (see
// finish()), as learnedidx is timed until it has folded its buffers in.  --check then
// reads every key back, off the clock (see check_finished(); the tests use it).
//
// Build and use: docs/workloads.md, "The sindex peer".

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iostream>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sindex.h"
#include "sindex_impl.h"

namespace {

const char kMagic[8] = {'L', 'I', 'D', 'X', 'O', 'P', 'S', '1'};
const int kFormat = 3;  // learnedidx.workloads.streamfile.FORMAT
enum Op : uint8_t { READ = 0, UPDATE = 1, INSERT = 2, SCAN = 3, RMW = 4, DELETE = 5 };
const char *const kOpNames[] = {"READ", "UPDATE", "INSERT", "SCAN", "READ-MODIFY-WRITE", "DELETE"};
const size_t kSlots[] = {16, 24, 32, 48, 64, 128, 256};
const uint8_t kMissing[] = {0, '<', 'n', 'o', 'n', 'e', '>'};  // runner._Digest._MISSING
const uint64_t kNoValue = ~uint64_t(0);

[[noreturn]] void fail(const std::string &msg) {
  std::fprintf(stderr, "sindex_driver: %s\n", msg.c_str());
  std::exit(2);
}

// ---------------------------------------------------------------- the stream file

// Keys of one section: their bytes back to back, offsets[i]..offsets[i+1].
struct KeyColumn {
  std::vector<uint64_t> offsets;
  const uint8_t *bytes = nullptr;
  size_t size() const { return offsets.size() - 1; }
  size_t len(size_t i) const { return offsets[i + 1] - offsets[i]; }
  const uint8_t *at(size_t i) const { return bytes + offsets[i]; }
};

struct Stream {
  std::vector<uint8_t> file;
  KeyColumn values;  // what the digest reads of each distinct value, by value id
  KeyColumn load_keys;
  std::vector<uint32_t> load_vals;
  KeyColumn run_keys;
  std::vector<uint8_t> ops;
  std::vector<uint32_t> args;  // value id of a write, length of a scan
  std::vector<uint32_t> batches;
};

class Reader {
 public:
  Reader(const uint8_t *p, const uint8_t *end) : p_(p), end_(end) {}
  const uint8_t *take(uint64_t n) {
    if (n > uint64_t(end_ - p_)) fail("the stream file is truncated");
    const uint8_t *at = p_;
    p_ += n;
    return at;
  }
  template <class T>
  T get() {
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  template <class T>
  std::vector<T> array(uint64_t n) {
    if (n > uint64_t(end_ - p_) / sizeof(T)) fail("the stream file is truncated");
    std::vector<T> v(n);
    std::memcpy(v.data(), take(n * sizeof(T)), n * sizeof(T));
    return v;
  }
  KeyColumn column(uint64_t n, bool wide) {  // lengths (u16, or u32 if wide), then bytes
    KeyColumn c;
    c.offsets.resize(n + 1);
    c.offsets[0] = 0;
    for (uint64_t i = 0; i < n; i++) {
      c.offsets[i + 1] = c.offsets[i] + (wide ? get_at<uint32_t>(i) : get_at<uint16_t>(i));
    }
    take(n * (wide ? 4 : 2));
    c.bytes = take(c.offsets[n]);
    return c;
  }
  bool done() const { return p_ == end_; }

 private:
  template <class T>
  T get_at(uint64_t i) {
    if ((i + 1) * sizeof(T) > uint64_t(end_ - p_)) fail("the stream file is truncated");
    T v;
    std::memcpy(&v, p_ + i * sizeof(T), sizeof(T));
    return v;
  }
  const uint8_t *p_, *end_;
};

void read_stream(const char *path, Stream &s) {
  FILE *f = std::fopen(path, "rb");
  if (!f) fail(std::string("cannot open ") + path + ": " + std::strerror(errno));
  std::fseek(f, 0, SEEK_END);
  long size = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  s.file.resize(size_t(size));
  if (size < 0 || std::fread(s.file.data(), 1, s.file.size(), f) != s.file.size()) {
    fail(std::string("cannot read ") + path);
  }
  std::fclose(f);
  Reader r(s.file.data(), s.file.data() + s.file.size());
  if (std::memcmp(r.take(8), kMagic, 8) != 0) fail("not a learnedidx stream file (bad magic)");
  uint64_t nv = r.get<uint64_t>();
  s.values = r.column(nv, true);
  uint64_t nl = r.get<uint64_t>();
  s.load_keys = r.column(nl, false);
  s.load_vals = r.array<uint32_t>(nl);
  uint64_t nr = r.get<uint64_t>();
  s.ops = r.array<uint8_t>(nr);
  s.run_keys = r.column(nr, false);
  s.args = r.array<uint32_t>(nr);
  s.batches = r.array<uint32_t>(r.get<uint64_t>());
  if (!r.done()) fail("trailing bytes after the stream");
  for (uint32_t v : s.load_vals) {
    if (v >= nv) fail("a load value id is out of range");
  }
  uint64_t total = 0;
  for (uint64_t i = 0; i < nr; i++) {
    if (s.ops[i] > DELETE) fail("unknown operation code " + std::to_string(s.ops[i]));
    bool writes = s.ops[i] == UPDATE || s.ops[i] == INSERT || s.ops[i] == RMW;
    if (writes && s.args[i] >= nv) fail("a run value id is out of range");
  }
  for (uint32_t b : s.batches) {
    if (b == 0) fail("an empty batch");
    total += b;
  }
  if (total != nr) fail("the batches do not cover the run phase");
}

// ---------------------------------------------------------------- keys in fixed slots

// A key in a fixed slot of L bytes, zero-padded: the key type SIndex's templates expect
// (byte-wise order, features = the slot's bytes as doubles).
template <size_t L>
struct SlotKey {
  uint8_t buf[L];

  static constexpr size_t model_key_size() { return L; }
  static SlotKey min() { return SlotKey(); }
  static SlotKey max() {
    SlotKey k;
    std::memset(k.buf, 0xff, L);
    return k;
  }
  SlotKey() { std::memset(buf, 0, L); }
  SlotKey(const uint8_t *p, size_t n) {
    std::memcpy(buf, p, n);
    std::memset(buf + n, 0, L - n);
  }
  size_t length() const {  // keys never end in NUL (checked), so padding is all trailing zeros
    size_t n = L;
    while (n && !buf[n - 1]) n--;
    return n;
  }
  void get_model_key(size_t begin, size_t l, double *target) const {
    for (size_t i = 0; i < l; i++) target[i] = buf[begin + i];
  }
  bool less_than(const SlotKey &o, size_t begin, size_t l) const {
    return std::memcmp(buf + begin, o.buf + begin, l) < 0;
  }
  friend bool operator<(const SlotKey &a, const SlotKey &b) { return std::memcmp(a.buf, b.buf, L) < 0; }
  friend bool operator>(const SlotKey &a, const SlotKey &b) { return std::memcmp(a.buf, b.buf, L) > 0; }
  friend bool operator<=(const SlotKey &a, const SlotKey &b) { return std::memcmp(a.buf, b.buf, L) <= 0; }
  friend bool operator>=(const SlotKey &a, const SlotKey &b) { return std::memcmp(a.buf, b.buf, L) >= 0; }
  friend bool operator==(const SlotKey &a, const SlotKey &b) { return std::memcmp(a.buf, b.buf, L) == 0; }
  friend bool operator!=(const SlotKey &a, const SlotKey &b) { return std::memcmp(a.buf, b.buf, L) != 0; }
  friend std::ostream &operator<<(std::ostream &os, const SlotKey &k) {
    return os << std::string(reinterpret_cast<const char *>(k.buf), k.length());
  }
} __attribute__((packed));

// The smallest slot that holds every key; refuses keys SIndex cannot store faithfully.
size_t choose_slot(const Stream &s) {
  size_t longest = 0;
  for (const KeyColumn *c : {&s.load_keys, &s.run_keys}) {
    for (size_t i = 0; i < c->size(); i++) {
      size_t n = c->len(i);
      if (n == 0) {
        fail("an empty key: SIndex uses the all-zero slot as its smallest-key sentinel");
      }
      if (c->at(i)[n - 1] == 0) {
        fail("a key ends in a NUL byte: keys are zero-padded in their slot, so it could not "
             "be told from the same key without that byte");
      }
      longest = std::max(longest, n);
    }
  }
  for (size_t slot : kSlots) {
    if (longest <= slot) return slot;
  }
  fail("the longest key has " + std::to_string(longest) + " bytes; the largest key slot is " +
       std::to_string(kSlots[sizeof(kSlots) / sizeof(kSlots[0]) - 1]) + " bytes");
}

// ---------------------------------------------------------------- the digest

// CRC-32 as zlib.crc32 (reflected polynomial 0xEDB88320), chained as runner._Digest does.
class Digest {
 public:
  explicit Digest(const KeyColumn &values) : values_(values) {
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table_[i] = c;
    }
  }
  void read(uint64_t value_id) {
    if (value_id == kNoValue) {
      add(kMissing, sizeof(kMissing));
    } else {
      add(values_.at(value_id), values_.len(value_id));
    }
  }
  template <class K>
  void scan(const std::vector<std::pair<K, uint64_t>> &pairs, size_t begin, size_t end) {
    uint32_t n = uint32_t(end - begin);
    uint8_t len[4] = {uint8_t(n), uint8_t(n >> 8), uint8_t(n >> 16), uint8_t(n >> 24)};
    add(len, 4);
    for (size_t i = begin; i < end; i++) {
      add(pairs[i].first.buf, pairs[i].first.length());
      read(pairs[i].second);
    }
  }
  uint32_t value() const { return crc_; }

 private:
  void add(const uint8_t *p, size_t n) {
    uint32_t c = ~crc_;
    for (size_t i = 0; i < n; i++) c = table_[(c ^ p[i]) & 0xff] ^ (c >> 8);
    crc_ = ~c;
  }
  const KeyColumn &values_;
  uint32_t table_[256];
  uint32_t crc_ = 0;
};

// ---------------------------------------------------------------- timing and reports

using Clock = std::chrono::steady_clock;
inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// Latencies in whole microseconds (at least 1, as the runner records them) per operation; in
// batch mode an operation's is its batch's (the runner's rule).
struct Latencies {
  std::map<uint64_t, uint64_t> counts[6];
  void add(int op, int64_t ns) { add_us(op, ns / 1000); }
  void add_us(int op, int64_t us, uint64_t times = 1) { counts[op][std::max<int64_t>(us, 1)] += times; }
};

struct Options {
  std::string mode = "per-op";
  bool fix_exited = false;
  bool check = false;
  const char *path = nullptr;
};

void print_report(const Options &o, size_t slot, const char *phase, size_t operations, int64_t runtime_ns,
                  uint32_t digest, const Latencies &lat, const std::string &extra) {
  std::printf("{\"driver\": \"learnedidx-sindex-driver\", \"format\": %d, \"variant\": \"%s\", "
              "\"slot\": %zu, \"phase\": \"%s\", \"mode\": \"%s\", \"operations\": %zu, "
              "\"runtime_ns\": %lld, \"digest\": %u%s, \"latency_us\": {",
              kFormat, o.fix_exited ? "exited-fix" : "released", slot, phase, o.mode.c_str(), operations,
              (long long)runtime_ns, digest, extra.c_str());
  bool first_op = true;
  for (int op = 0; op < 6; op++) {
    if (lat.counts[op].empty()) continue;
    std::printf("%s\"%s\": [", first_op ? "" : ", ", kOpNames[op]);
    bool first = true;
    for (const auto &uc : lat.counts[op]) {
      std::printf("%s[%llu, %llu]", first ? "" : ", ", (unsigned long long)uc.first,
                  (unsigned long long)uc.second);
      first = false;
    }
    std::printf("]");
    first_op = false;
  }
  std::printf("}}\n");
  std::fflush(stdout);
}

// ---------------------------------------------------------------- finishing a run
//
// A run is timed until the peer has done the work it deferred (runner.execute's finish):
// learnedidx folds every insert buffer in and retrains every due group before its clock
// stops.  SIndex defers the same work to its background thread, whose compaction rounds
// come about a second apart, so the inserts its last round did not reach are still in
// the groups' buffers when the run ends.  finish() charges SIndex for that work:
//
// 1. It stops the background thread and waits for it to end.  Its master thread always
//    has a round started or about to start, and lets it run to the end first; that round
//    is deferred work done after the run, so the CPU time the process spends meanwhile is
//    charged (the worker is blocked in the wait, so that is the background's; the wait's
//    wall time, mostly the thread's one-second sleeps, is not).
// 2. Then it does on the clock what SIndex's next round would: every group whose buffer
//    holds more than config.buffer_compact_threshold records is compacted (merged into
//    the array, models retrained) through SIndex's own compact_phase_1/compact_phase_2.
//
// The members this needs are private.  An explicit instantiation may name private
// members (C++ [temp.explicit]: access checking does not apply to the names in it), so
// each is reached through a pointer to member set up by one, without editing SIndex.

template <class Tag>
struct Exposed {
  static typename Tag::type member;
};
template <class Tag>
typename Tag::type Exposed<Tag>::member;

template <class Tag, typename Tag::type Member>
struct Expose {
  struct Setter {
    Setter() { Exposed<Tag>::member = Member; }
  };
  static Setter setter;
};
template <class Tag, typename Tag::type Member>
typename Expose<Tag, Member>::Setter Expose<Tag, Member>::setter;

template <class Class, class Type, int Which>
struct Field {
  typedef Type Class::*type;
};

template <size_t L>
using IndexOf = sindex::SIndex<SlotKey<L>, uint64_t>;
template <size_t L>
using RootOf = sindex::Root<SlotKey<L>, uint64_t, false>;
template <size_t L>
using GroupOf = sindex::Group<SlotKey<L>, uint64_t, false>;
template <size_t L>
using Slots = std::unique_ptr<std::pair<SlotKey<L>, GroupOf<L> *volatile>[]>;

template <size_t L>
struct Private {
  typedef Field<IndexOf<L>, RootOf<L> *volatile, 0> root;
  typedef Field<IndexOf<L>, volatile bool, 1> bg_running;
  typedef Field<IndexOf<L>, pthread_t, 2> bg_master;
  typedef Field<RootOf<L>, Slots<L>, 3> groups;
  typedef Field<RootOf<L>, uint32_t, 4> group_n;
  typedef Field<GroupOf<L>, GroupOf<L> *, 5> next;
  typedef Field<GroupOf<L>, sindex::AltBtreeBuffer<SlotKey<L>, uint64_t> *, 6> buffer;
};

#define EXPOSE_SINDEX(L)                                                                        \
  template struct Expose<Private<L>::root, &IndexOf<L>::root>;                                  \
  template struct Expose<Private<L>::bg_running, &IndexOf<L>::bg_running>;                      \
  template struct Expose<Private<L>::bg_master, &IndexOf<L>::bg_master>;                        \
  template struct Expose<Private<L>::groups, &RootOf<L>::groups>;                               \
  template struct Expose<Private<L>::group_n, &RootOf<L>::group_n>;                             \
  template struct Expose<Private<L>::next, &GroupOf<L>::next>;                                  \
  template struct Expose<Private<L>::buffer, &GroupOf<L>::buffer>;
EXPOSE_SINDEX(16)
EXPOSE_SINDEX(24)
EXPOSE_SINDEX(32)
EXPOSE_SINDEX(48)
EXPOSE_SINDEX(64)
EXPOSE_SINDEX(128)
EXPOSE_SINDEX(256)
#undef EXPOSE_SINDEX

template <class Tag, class Object>
auto &field(Object &o) {
  return o.*Exposed<Tag>::member;
}

int64_t cpu_ns() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

struct Finish {
  int64_t background_cpu_ns = 0;  // the background's last round, after the run
  int64_t sweep_ns = 0;           // compacting what that round left
  size_t groups = 0, compacted = 0;
  int64_t ns() const { return background_cpu_ns + sweep_ns; }
};

// Stops SIndex's background thread, then compacts every group its next round would.
template <size_t L>
Finish finish(IndexOf<L> &index) {
  typedef Private<L> P;
  Finish f;
  sindex::config.exited = true;  // the background's barriers stop waiting for the (idle) worker
  int64_t c0 = cpu_ns();
  field<typename P::bg_running>(index) = false;
  pthread_join(field<typename P::bg_master>(index), nullptr);
  f.background_cpu_ns = cpu_ns() - c0;
  int64_t t0 = now_ns();
  RootOf<L> &root = *field<typename P::root>(index);
  for (uint32_t i = 0; i < field<typename P::group_n>(root); i++) {
    GroupOf<L> *volatile *slot = &field<typename P::groups>(root)[i].second;
    while (*slot != nullptr) {  // the group and the ones chained after it, as a round walks them
      GroupOf<L> *old = *slot;
      f.groups++;
      if (field<typename P::buffer>(*old)->size() > sindex::config.buffer_compact_threshold) {
        GroupOf<L> *fresh = old->compact_phase_1();
        *slot = fresh;
        fresh->compact_phase_2();
        old->free_data();
        old->free_buffer();
        delete old;
        f.compacted++;
      }
      slot = &field<typename P::next>(**slot);
    }
  }
  f.sweep_ns = now_ns() - t0;
  return f;
}

// --check: after the finish, every key holds its last write and a deleted key none, as
// SIndex's own get reads them (off the clock): finishing left the index whole.  Returns
// how many keys it checked; a wrong one ends the program.
template <size_t L>
size_t check_finished(IndexOf<L> &index, const Stream &s, const std::vector<SlotKey<L>> &run_keys) {
  std::unordered_map<std::string, uint64_t> last;
  auto name = [](const SlotKey<L> &k) { return std::string(reinterpret_cast<const char *>(k.buf), L); };
  for (size_t i = 0; i < s.load_keys.size(); i++) {
    last[name(SlotKey<L>(s.load_keys.at(i), s.load_keys.len(i)))] = s.load_vals[i];
  }
  for (size_t i = 0; i < run_keys.size(); i++) {
    int op = s.ops[i];
    if (op == UPDATE || op == INSERT || op == RMW) last[name(run_keys[i])] = s.args[i];
    if (op == DELETE) last[name(run_keys[i])] = kNoValue;
  }
  for (const auto &kv : last) {
    SlotKey<L> k(reinterpret_cast<const uint8_t *>(kv.first.data()), L);
    uint64_t v = kNoValue;
    if (!index.get(k, v, 0)) v = kNoValue;
    if (v != kv.second) fail("--check: a key does not hold its last write after the finish");
  }
  return last.size();
}

// ---------------------------------------------------------------- the phases

template <size_t L>
int run(const Stream &s, const Options &o) {
  typedef SlotKey<L> key_t;
  typedef sindex::SIndex<key_t, uint64_t> index_t;

  // Keys go into their slots before any clock starts, as the runner's streams hold ready
  // bytes objects.
  struct Rec {
    key_t key;
    uint32_t pos;  // in the load stream: among equal keys the last one wins
  };
  std::vector<Rec> load(s.load_keys.size());
  for (size_t i = 0; i < load.size(); i++) load[i] = {key_t(s.load_keys.at(i), s.load_keys.len(i)), uint32_t(i)};
  std::vector<key_t> run_keys(s.run_keys.size());
  for (size_t i = 0; i < run_keys.size(); i++) run_keys[i] = key_t(s.run_keys.at(i), s.run_keys.len(i));
  const char *sentinel = "a key of all 0xff bytes fills its slot: it is SIndex's largest-key sentinel";
  for (const key_t &k : run_keys) {
    if (k == key_t::max()) fail(sentinel);
  }
  for (const Rec &r : load) {
    if (r.key == key_t::max()) fail(sentinel);
  }
  if (load.empty()) fail("SIndex needs at least one key to load");

  // Load phase: sort + build (SIndex's constructor trains every group and the root).
  int64_t t0 = now_ns();
  std::sort(load.begin(), load.end(), [](const Rec &a, const Rec &b) {
    int c = std::memcmp(a.key.buf, b.key.buf, L);
    return c < 0 || (c == 0 && a.pos < b.pos);
  });
  std::vector<key_t> keys;
  std::vector<uint64_t> vals;
  keys.reserve(load.size());
  vals.reserve(load.size());
  for (size_t i = 0; i < load.size(); i++) {
    if (i + 1 < load.size() && load[i + 1].key == load[i].key) continue;
    keys.push_back(load[i].key);
    vals.push_back(s.load_vals[load[i].pos]);
  }
  int64_t t1 = now_ns();
  index_t *index = new index_t(keys, vals, 1, 1);  // one worker, one background thread
  int64_t t2 = now_ns();
  if (o.fix_exited) sindex::config.exited = false;
  {
    Latencies lat;  // one bulk operation: each key waited for all of it, as in a batch
    lat.add_us(INSERT, (t2 - t0) / 1000, load.size());
    print_report(o, L, "load", load.size(), t2 - t0, 0, lat,
                 ", \"sort_ns\": " + std::to_string(t1 - t0) + ", \"build_ns\": " + std::to_string(t2 - t1) +
                     ", \"distinct_keys\": " + std::to_string(keys.size()));
  }
  std::vector<key_t>().swap(keys);
  std::vector<uint64_t>().swap(vals);
  std::vector<Rec>().swap(load);

  // Run phase.
  Digest digest(s.values);
  Latencies lat;
  std::vector<std::pair<key_t, uint64_t>> scanned;
  int64_t digest_ns = 0, start = 0, elapsed = 0;
  const size_t n = s.ops.size();
  auto get = [&](size_t i) -> uint64_t {
    uint64_t v;
    return index->get(run_keys[i], v, 0) ? v : kNoValue;
  };
  if (o.mode == "per-op") {
    start = now_ns();
    for (size_t i = 0; i < n; i++) {
      int op = s.ops[i];
      int64_t a = now_ns(), b;
      uint64_t read = kNoValue;
      switch (op) {
        case READ:
          read = get(i);
          b = now_ns();
          digest.read(read);
          break;
        case SCAN:
          index->scan(run_keys[i], s.args[i], scanned, 0);
          b = now_ns();
          digest.scan(scanned, 0, scanned.size());
          break;
        case RMW:
          read = get(i);
          index->put(run_keys[i], s.args[i], 0);
          b = now_ns();
          digest.read(read);
          break;
        case DELETE:
          index->remove(run_keys[i], 0);
          b = now_ns();
          break;
        default:  // UPDATE, INSERT
          index->put(run_keys[i], s.args[i], 0);
          b = now_ns();
      }
      lat.add(op, b - a);
      digest_ns += now_ns() - b;
    }
    elapsed = now_ns() - start - digest_ns;
  } else {
    // The runner's batches (cut by the writer): results are kept and digested after each
    // batch's clock stops, and every operation's latency is the batch's time.
    // In operation order: a read's value id, or kScan and where a scan's pairs end.
    const uint64_t kScan = kNoValue - 1;
    std::vector<std::pair<uint64_t, size_t>> results;
    std::vector<std::pair<key_t, uint64_t>> one;
    start = now_ns();
    size_t i = 0;
    for (uint32_t size : s.batches) {
      results.clear();
      scanned.clear();
      int64_t a = now_ns();
      for (size_t j = i; j < i + size; j++) {
        switch (s.ops[j]) {
          case READ:
            results.emplace_back(get(j), 0);
            break;
          case SCAN:
            index->scan(run_keys[j], s.args[j], one, 0);
            scanned.insert(scanned.end(), one.begin(), one.end());
            results.emplace_back(kScan, scanned.size());
            break;
          case RMW:
            results.emplace_back(get(j), 0);
            index->put(run_keys[j], s.args[j], 0);
            break;
          case DELETE:
            index->remove(run_keys[j], 0);
            break;
          default:
            index->put(run_keys[j], s.args[j], 0);
        }
      }
      int64_t b = now_ns();
      size_t from = 0;
      for (const auto &r : results) {
        if (r.first == kScan) {
          digest.scan(scanned, from, r.second);
          from = r.second;
        } else {
          digest.read(r.first);
        }
      }
      for (size_t j = i; j < i + size; j++) lat.add_us(s.ops[j], (b - a) / 1000);
      i += size;
      digest_ns += now_ns() - b;
    }
    elapsed = now_ns() - start - digest_ns;
  }
  // The clock runs on through the work SIndex deferred (see finish()).
  Finish f = finish<L>(*index);
  std::string extra = ", \"finish_ns\": " + std::to_string(f.ns()) + ", \"finish_background_cpu_ns\": " +
                      std::to_string(f.background_cpu_ns) + ", \"finish_sweep_ns\": " + std::to_string(f.sweep_ns) +
                      ", \"compacted_groups\": " + std::to_string(f.compacted) + ", \"groups\": " +
                      std::to_string(f.groups);
  if (o.check) extra += ", \"checked_keys\": " + std::to_string(check_finished<L>(*index, s, run_keys));
  print_report(o, L, "run", n, elapsed + f.ns(), digest.value(), lat, extra);
  // No destructor: SIndex's does not join its background threads, which still read the
  // index; leaving through _exit ends them with the process.
  std::fflush(stdout);
  _exit(0);
}

}  // namespace

int main(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--version") {
      std::printf("learnedidx-sindex-driver %d\n", kFormat);
      return 0;
    } else if (a == "--fix-exited") {
      o.fix_exited = true;
    } else if (a == "--check") {
      o.check = true;
    } else if (a == "--mode" && i + 1 < argc) {
      o.mode = argv[++i];
      if (o.mode != "per-op" && o.mode != "batch") fail("--mode takes per-op or batch");
    } else if (!a.empty() && a[0] == '-') {
      fail("unknown option " + a + "; usage: sindex_driver [--mode per-op|batch] [--fix-exited] [--check] STREAM_FILE");
    } else if (o.path == nullptr) {
      o.path = argv[i];
    } else {
      fail("one stream file only");
    }
  }
  if (o.path == nullptr) fail("usage: sindex_driver [--mode per-op|batch] [--fix-exited] [--check] STREAM_FILE");
  Stream s;
  read_stream(o.path, s);
  switch (choose_slot(s)) {
    case 16: return run<16>(s, o);
    case 24: return run<24>(s, o);
    case 32: return run<32>(s, o);
    case 48: return run<48>(s, o);
    case 64: return run<64>(s, o);
    case 128: return run<128>(s, o);
    default: return run<256>(s, o);
  }
}
