// Copyright fencegate authors.
//
// The figures the harness reports from its runs: each ratio to direct
// taken within one round, medians over rounds, and the JSON.

#include <string>
#include <vector>

#include "bench/run_stats.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fencegate::bench {
namespace {

using ::testing::DoubleEq;
using ::testing::HasSubstr;
using ::testing::Not;

RunStats MakeRun(const std::string& target, int round, uint64_t ops,
                 uint32_t latency_us = 100) {
  RunStats r;
  r.target = target;
  r.pattern = "steady";
  r.clients = 16;
  r.round = round;
  r.seconds = 1;
  r.ops = ops;
  r.latencies_us = {latency_us};
  return r;
}

TEST(ReportTest, VsDirectComparesWithTheSameRound) {
  const std::vector<RunStats> runs = {
      MakeRun("direct", 0, 1000), MakeRun("gateway-pg", 0, 500),
      MakeRun("direct", 1, 2000), MakeRun("gateway-pg", 1, 1500)};
  EXPECT_THAT(VsDirect(runs, runs[1]), DoubleEq(0.5));
  EXPECT_THAT(VsDirect(runs, runs[3]), DoubleEq(0.75));
  EXPECT_THAT(VsDirect(runs, runs[0]), DoubleEq(1.0));
  RunStats other = MakeRun("gateway-pg", 0, 500);
  other.clients = 64;  // No direct run at 64 clients.
  EXPECT_EQ(VsDirect(runs, other), -1);
}

TEST(ReportTest, VsPlainComparesAVariantWithItsPlainTargetInTheSameRound) {
  EXPECT_EQ(PlainTargetOf("gateway-file-seq"), "gateway-file");
  EXPECT_EQ(PlainTargetOf("gateway-noop-mtls"), "gateway-noop");
  EXPECT_EQ(PlainTargetOf("gateway-pg-metrics"), "gateway-pg");
  EXPECT_EQ(PlainTargetOf("gateway-pg"), "");
  EXPECT_EQ(PlainTargetOf("-seq"), "");
  const std::vector<RunStats> runs = {
      MakeRun("gateway-file", 0, 1000), MakeRun("gateway-file-seq", 0, 900),
      MakeRun("gateway-file", 1, 500),  MakeRun("gateway-file-seq", 1, 600),
      MakeRun("gateway-file", 2, 800),  MakeRun("gateway-file-seq", 2, 760)};
  EXPECT_THAT(VsPlain(runs, runs[1]), DoubleEq(0.9));
  EXPECT_THAT(VsPlain(runs, runs[3]), DoubleEq(1.2));
  EXPECT_EQ(VsPlain(runs, runs[0]), -1);  // Not a variant.
  RunStats other = MakeRun("gateway-pg-seq", 0, 500);
  EXPECT_EQ(VsPlain(runs, other), -1);  // No gateway-pg run.
  const std::vector<RoundsSummary> summaries = SummarizeRounds(runs);
  ASSERT_EQ(summaries.size(), 2u);
  // Per round 0.9, 1.2, 0.95.
  EXPECT_THAT(summaries[1].vs_plain, DoubleEq(0.95));
  EXPECT_THAT(summaries[1].vs_plain_min, DoubleEq(0.9));
  EXPECT_THAT(summaries[1].vs_plain_max, DoubleEq(1.2));
  EXPECT_EQ(summaries[0].vs_plain, -1);
  EXPECT_THAT(ToJson(runs, ""),
              HasSubstr("\"vs_plain\": 0.950, \"vs_plain_min\": 0.900, "
                        "\"vs_plain_max\": 1.200}"));
}

TEST(ReportTest, SummarizeRoundsTakesMediansAndTheRatiosSpread) {
  const std::vector<RunStats> runs = {
      MakeRun("gateway-pg", 0, 100, 30), MakeRun("direct", 0, 200),
      MakeRun("gateway-pg", 1, 300, 10), MakeRun("direct", 1, 200),
      MakeRun("gateway-pg", 2, 200, 20), MakeRun("direct", 2, 400)};
  const std::vector<RoundsSummary> summaries = SummarizeRounds(runs);
  ASSERT_EQ(summaries.size(), 2u);
  const RoundsSummary& gw = summaries[0];  // In order of first appearance.
  EXPECT_EQ(gw.target, "gateway-pg");
  EXPECT_EQ(gw.rounds, 3);
  EXPECT_THAT(gw.ops_per_s, DoubleEq(200));
  EXPECT_THAT(gw.p50_us, DoubleEq(20));
  // Per round 0.5, 1.5, 0.5: not the ratio of the medians (200 / 200).
  EXPECT_THAT(gw.vs_direct, DoubleEq(0.5));
  EXPECT_THAT(gw.vs_direct_min, DoubleEq(0.5));
  EXPECT_THAT(gw.vs_direct_max, DoubleEq(1.5));
  EXPECT_EQ(gw.gateway_cpu_us, -1);  // No CPU was metered.
  EXPECT_EQ(gw.busy, -1);
  EXPECT_EQ(summaries[1].target, "direct");
  EXPECT_THAT(summaries[1].ops_per_s, DoubleEq(200));
}

TEST(ReportTest, SummarizeRoundsOfAnEvenCountAveragesTheMiddleTwo) {
  const std::vector<RunStats> runs = {
      MakeRun("gateway-noop", 0, 100), MakeRun("gateway-noop", 1, 400),
      MakeRun("gateway-noop", 2, 200), MakeRun("gateway-noop", 3, 1000)};
  const std::vector<RoundsSummary> summaries = SummarizeRounds(runs);
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_THAT(summaries[0].ops_per_s, DoubleEq(300));
  EXPECT_EQ(summaries[0].vs_direct, -1);  // No direct run.
}

TEST(ReportTest, SummarizeRoundsTakesMediansOfTheCpuFigures) {
  std::vector<RunStats> runs;
  for (int round = 0; round < 3; ++round) {
    RunStats r = MakeRun("gateway-pg", round, 1000);  // 1 s: per write = /1000.
    r.cpu.gateway = {0.010 * (round + 1), 1000.0 * (round + 1), {}};
    r.cpu.postgres = {0.050, -1, {}};
    r.cpu.harness = {0.020 + 0.001 * round, 0, {}};
    r.cpu.machine_busy = 1.0 + round;
    r.cpu.machine_total = 2.0;
    runs.push_back(r);
  }
  runs[1].cpu.postgres.cpu_s = -1;  // Unknown in one round: left out.
  const std::vector<RoundsSummary> summaries = SummarizeRounds(runs);
  ASSERT_EQ(summaries.size(), 1u);
  const RoundsSummary& m = summaries[0];
  EXPECT_THAT(m.gateway_cpu_us, DoubleEq(20));   // 10, 20, 30 us.
  EXPECT_THAT(m.postgres_cpu_us, DoubleEq(50));  // 50, 50 us.
  EXPECT_THAT(m.server_cpu_us, DoubleEq(60));    // 60, 20, 80 us.
  EXPECT_THAT(m.client_cpu_us, DoubleEq(21));    // 20, 21, 22 us.
  EXPECT_THAT(m.gateway_switches, DoubleEq(2));  // 1, 2, 3.
  EXPECT_THAT(m.busy, DoubleEq(1.0));            // 0.5, 1.0, 1.5.
}

TEST(ReportTest, ThreadSwitchesAreByThreadNameBusiestFirst) {
  RunStats r = MakeRun("gateway-pg", 0, 1000);
  EXPECT_EQ(r.ThreadSwitchesLine(), "");
  r.cpu.gateway.by_thread["fg-io"] = {4, 500};
  r.cpu.gateway.by_thread["fg-cq0"] = {1, 2000};
  r.cpu.gateway.by_thread["log-writer"] = {1, 4};  // 0.004 a write: left out.
  EXPECT_EQ(r.ThreadSwitchesLine(), "  fg-cq0×1 2.00  fg-io×4 0.50");
  r.ops = 0;
  EXPECT_EQ(r.ThreadSwitchesLine(), "");
}

TEST(ReportTest, JsonHasRoundsAndMediansOnlyWithRounds) {
  const std::vector<RunStats> one = {MakeRun("direct", 0, 1000),
                                     MakeRun("gateway-pg", 0, 500)};
  const std::string single = ToJson(one, "");
  EXPECT_THAT(single, HasSubstr("\"round\": 0"));
  EXPECT_THAT(single, HasSubstr("\"vs_direct\": 0.500"));
  EXPECT_THAT(single, Not(HasSubstr("\"medians\"")));

  std::vector<RunStats> two = one;
  two.push_back(MakeRun("direct", 1, 1000));
  two.push_back(MakeRun("gateway-pg", 1, 700));
  const std::string repeated = ToJson(two, "\"extra\": 1");
  EXPECT_THAT(repeated, HasSubstr("\"medians\""));
  EXPECT_THAT(repeated, HasSubstr("\"vs_direct\": 0.600, \"vs_direct_min\": "
                                  "0.500, \"vs_direct_max\": 0.700"));
  EXPECT_THAT(repeated, HasSubstr("\"extra\": 1\n}"));
}

}  // namespace
}  // namespace fencegate::bench
