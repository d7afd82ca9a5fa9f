// Copyright fencegate authors.

#include "bench/classifier.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "postgres/sql_classifier.h"

namespace fencegate::bench {
namespace {

using postgres::ClassifyStatement;
using postgres::SqlClassifier;
using postgres::StatementClass;

struct Statement {
  const char* name;
  std::string sql;
};

std::vector<Statement> Statements() {
  std::string wide = "INSERT INTO events (";
  std::string values = ") VALUES (";
  for (int i = 1; i <= 20; ++i) {
    absl::StrAppend(&wide, i > 1 ? ", " : "", "c", i);
    absl::StrAppend(&values, i > 1 ? ", " : "", "$", i);
  }
  std::string joins =
      "SELECT j.id, j.owner, a.amount, b.note FROM jobs j JOIN accounts a ON "
      "a.id = j.account JOIN notes b ON b.job = j.id WHERE j.id = $1";
  for (int i = 0; i < 30; ++i) {
    absl::StrAppend(&joins, " AND (j.tag", i, " IS NULL OR j.tag", i, " = $2)");
  }
  return {
      {"update (the throughput UPDATE)",
       "UPDATE bench SET n = n + 1 WHERE id = $1"},
      {"insert, 20 parameters", wide + values + ")"},
      {"select, 3 joins, 60 conditions", joins},
  };
}

// ns per call of `f`, over about 0.2 s.
template <typename F>
double NanosPerCall(F f) {
  int64_t calls = 0;
  const absl::Time start = absl::Now();
  absl::Duration spent;
  do {
    for (int i = 0; i < 64; ++i) f();
    calls += 64;
    spent = absl::Now() - start;
  } while (spent < absl::Milliseconds(200));
  return absl::ToDoubleNanoseconds(spent) / static_cast<double>(calls);
}

struct Spread {
  double median, low, high;
};

Spread Of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace

int RunClassifier(int rounds) {
  std::printf("%-34s %6s %26s %26s\n", "statement", "bytes",
              "miss ns (lowest-highest)", "hit ns (lowest-highest)");
  for (const Statement& s : Statements()) {
    if (ClassifyStatement(s.sql).kind != StatementClass::kSafe) {
      std::fprintf(stderr, "fencegate-bench: %s: not classified safe\n",
                   s.name);
      return 1;
    }
    std::vector<double> miss, hit;
    SqlClassifier cache(SqlClassifier::Options{});
    (void)cache.Classify(s.sql);
    for (int r = 0; r < rounds; ++r) {
      miss.push_back(NanosPerCall([&] { (void)ClassifyStatement(s.sql); }));
      hit.push_back(NanosPerCall([&] { (void)cache.Classify(s.sql); }));
    }
    const Spread m = Of(miss);
    const Spread h = Of(hit);
    std::printf("%-34s %6zu %10.0f (%6.0f-%6.0f) %10.0f (%6.0f-%6.0f)\n",
                s.name, s.sql.size(), m.median, m.low, m.high, h.median, h.low,
                h.high);
  }
  return 0;
}

}  // namespace fencegate::bench
