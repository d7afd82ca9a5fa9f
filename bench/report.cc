// Copyright fencegate authors.

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/run_stats.h"

namespace fencegate::bench {
namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(&out, absl::StrFormat("\\u%04x", c));
      continue;
    }
    out += c;
  }
  return out + "\"";
}

// The median of `v` (the mean of the middle two for an even count); -1 for
// none.
double Median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// `r`'s throughput over that of `base`'s run of the same pattern, client
// count and round in `runs`; -1 if there is none (or it wrote nothing).
double RatioTo(const std::vector<RunStats>& runs, const RunStats& r,
               const std::string& base) {
  for (const RunStats& d : runs) {
    if (d.target == base && d.pattern == r.pattern && d.clients == r.clients &&
        d.round == r.round) {
      return d.ops_per_s() > 0 ? r.ops_per_s() / d.ops_per_s() : -1;
    }
  }
  return -1;
}

// The median, lowest and highest of `ratios` into the three, left at -1
// for none.
void Spread(const std::vector<double>& ratios, double* median, double* min,
            double* max) {
  *median = Median(ratios);
  if (ratios.empty()) return;
  *min = *std::min_element(ratios.begin(), ratios.end());
  *max = *std::max_element(ratios.begin(), ratios.end());
}

}  // namespace

void RunStats::Finish() { std::sort(latencies_us.begin(), latencies_us.end()); }

double RunStats::Percentile(double p) const {
  if (latencies_us.empty()) return 0;
  size_t i = static_cast<size_t>(std::ceil(p / 100.0 * latencies_us.size()));
  return latencies_us[std::min(latencies_us.size() - 1, i == 0 ? 0 : i - 1)];
}

double RunStats::CpuPerWriteUs(const ProcessUsage& usage) const {
  if (usage.cpu_s < 0 || ops == 0) return -1;
  return usage.cpu_s * 1e6 / ops;
}

double RunStats::SwitchesPerWrite(const ProcessUsage& usage) const {
  if (usage.switches < 0 || ops == 0) return -1;
  return usage.switches / ops;
}

std::string RunStats::ThreadSwitchesLine() const {
  if (ops == 0) return "";
  std::vector<std::pair<double, std::string>> rows;
  for (const auto& [name, group] : cpu.gateway.by_thread) {
    const double per_write = group.switches / static_cast<double>(ops);
    if (per_write < 0.005) continue;
    rows.emplace_back(
        per_write, absl::StrFormat("%s×%d %.2f", name, group.count, per_write));
  }
  std::sort(rows.rbegin(), rows.rend());
  std::string line;
  for (const auto& [per_write, text] : rows) absl::StrAppend(&line, "  ", text);
  return line;
}

double RunStats::ServerCpuPerWriteUs() const {
  ProcessUsage server;
  for (const ProcessUsage& part : {cpu.gateway, cpu.postgres, cpu.pgbouncer}) {
    if (part.cpu_s >= 0)
      server.cpu_s = std::max(server.cpu_s, 0.0) + part.cpu_s;
  }
  return CpuPerWriteUs(server);
}

double RunStats::MachineBusy() const {
  return cpu.machine_total > 0 ? cpu.machine_busy / cpu.machine_total : 0;
}

double VsDirect(const std::vector<RunStats>& runs, const RunStats& r) {
  return RatioTo(runs, r, "direct");
}

std::string PlainTargetOf(const std::string& target) {
  for (absl::string_view suffix : {"-seq", "-mtls", "-metrics"}) {
    if (absl::EndsWith(target, suffix) && target.size() > suffix.size()) {
      return target.substr(0, target.size() - suffix.size());
    }
  }
  return "";
}

double VsPlain(const std::vector<RunStats>& runs, const RunStats& r) {
  const std::string plain = PlainTargetOf(r.target);
  return plain.empty() ? -1 : RatioTo(runs, r, plain);
}

std::vector<RoundsSummary> SummarizeRounds(const std::vector<RunStats>& runs) {
  std::vector<RoundsSummary> out;
  for (const RunStats& first : runs) {
    auto same = [&](const auto& x) {
      return x.target == first.target && x.pattern == first.pattern &&
             x.clients == first.clients;
    };
    if (std::any_of(out.begin(), out.end(), same)) continue;
    std::vector<double> ops, p50, p99, server, gateway, postgres, client,
        switches, busy, ratios, plain_ratios;
    // Only the known figures (>= 0) count.
    auto add = [](std::vector<double>& to, double v) {
      if (v >= 0) to.push_back(v);
    };
    for (const RunStats& r : runs) {
      if (!same(r)) continue;
      ops.push_back(r.ops_per_s());
      p50.push_back(r.Percentile(50));
      p99.push_back(r.Percentile(99));
      add(server, r.ServerCpuPerWriteUs());
      add(gateway, r.CpuPerWriteUs(r.cpu.gateway));
      add(postgres, r.CpuPerWriteUs(r.cpu.postgres));
      add(client, r.CpuPerWriteUs(r.cpu.harness));
      add(switches, r.SwitchesPerWrite(r.cpu.gateway));
      if (r.cpu.machine_total > 0) busy.push_back(r.MachineBusy());
      add(ratios, VsDirect(runs, r));
      add(plain_ratios, VsPlain(runs, r));
    }
    RoundsSummary s;
    s.target = first.target;
    s.pattern = first.pattern;
    s.clients = first.clients;
    s.rounds = static_cast<int>(ops.size());
    s.ops_per_s = Median(ops);
    s.p50_us = Median(p50);
    s.p99_us = Median(p99);
    s.server_cpu_us = Median(server);
    s.gateway_cpu_us = Median(gateway);
    s.postgres_cpu_us = Median(postgres);
    s.client_cpu_us = Median(client);
    s.gateway_switches = Median(switches);
    s.busy = Median(busy);
    Spread(ratios, &s.vs_direct, &s.vs_direct_min, &s.vs_direct_max);
    Spread(plain_ratios, &s.vs_plain, &s.vs_plain_min, &s.vs_plain_max);
    out.push_back(std::move(s));
  }
  return out;
}

std::string ToJson(const std::vector<RunStats>& runs,
                   const std::string& extra_json_fields) {
  std::string out = "{\n  \"runs\": [\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunStats& r = runs[i];
    absl::StrAppend(
        &out, "    {\"target\": ", JsonString(r.target),
        ", \"pattern\": ", JsonString(r.pattern), ", \"clients\": ", r.clients,
        ", \"round\": ", r.round,
        absl::StrFormat(", \"vs_direct\": %.3f, \"vs_plain\": %.3f",
                        VsDirect(runs, r), VsPlain(runs, r)),
        absl::StrFormat(", \"seconds\": %.3f, \"ops\": %d, \"errors\": %d, "
                        "\"ops_per_s\": %.1f, \"p50_us\": %.0f, "
                        "\"p99_us\": %.0f, \"p999_us\": %.0f",
                        r.seconds, r.ops, r.errors, r.ops_per_s(),
                        r.Percentile(50), r.Percentile(99), r.Percentile(99.9)),
        absl::StrFormat(
            ", \"cpu_us_per_write\": {\"server\": %.1f, \"harness\": %.1f, "
            "\"gateway\": %.1f, \"postgres\": %.1f, \"pgbouncer\": %.1f}, "
            "\"switches_per_write\": {\"harness\": %.2f, \"gateway\": %.2f, "
            "\"postgres\": %.2f, \"pgbouncer\": %.2f}, \"machine_busy\": "
            "%.3f",
            r.ServerCpuPerWriteUs(), r.CpuPerWriteUs(r.cpu.harness),
            r.CpuPerWriteUs(r.cpu.gateway), r.CpuPerWriteUs(r.cpu.postgres),
            r.CpuPerWriteUs(r.cpu.pgbouncer), r.SwitchesPerWrite(r.cpu.harness),
            r.SwitchesPerWrite(r.cpu.gateway),
            r.SwitchesPerWrite(r.cpu.postgres),
            r.SwitchesPerWrite(r.cpu.pgbouncer), r.MachineBusy()),
        ", \"first_error\": ", JsonString(r.first_error), "}",
        i + 1 < runs.size() ? "," : "", "\n");
  }
  absl::StrAppend(&out, "  ]");
  bool rounds = std::any_of(runs.begin(), runs.end(),
                            [](const RunStats& r) { return r.round > 0; });
  if (rounds) {
    const std::vector<RoundsSummary> summaries = SummarizeRounds(runs);
    absl::StrAppend(&out, ",\n  \"medians\": [\n");
    for (size_t i = 0; i < summaries.size(); ++i) {
      const RoundsSummary& m = summaries[i];
      absl::StrAppend(
          &out, "    {\"target\": ", JsonString(m.target),
          ", \"pattern\": ", JsonString(m.pattern),
          absl::StrFormat(
              ", \"clients\": %d, \"rounds\": %d, \"ops_per_s\": %.1f, "
              "\"p50_us\": %.0f, \"p99_us\": %.0f, ",
              m.clients, m.rounds, m.ops_per_s, m.p50_us, m.p99_us),
          absl::StrFormat(
              "\"cpu_us_per_write\": {\"server\": %.1f, \"gateway\": %.1f, "
              "\"postgres\": %.1f, \"harness\": %.1f}, "
              "\"gateway_switches_per_write\": %.2f, \"machine_busy\": %.3f, ",
              m.server_cpu_us, m.gateway_cpu_us, m.postgres_cpu_us,
              m.client_cpu_us, m.gateway_switches, m.busy),
          absl::StrFormat("\"vs_direct\": %.3f, \"vs_direct_min\": %.3f, "
                          "\"vs_direct_max\": %.3f, ",
                          m.vs_direct, m.vs_direct_min, m.vs_direct_max),
          absl::StrFormat("\"vs_plain\": %.3f, \"vs_plain_min\": %.3f, "
                          "\"vs_plain_max\": %.3f}%s\n",
                          m.vs_plain, m.vs_plain_min, m.vs_plain_max,
                          i + 1 < summaries.size() ? "," : ""));
    }
    absl::StrAppend(&out, "  ]");
  }
  absl::StrAppend(&out, extra_json_fields.empty() ? "" : ",\n",
                  extra_json_fields, "\n}\n");
  return out;
}

std::string ToSvg(const std::vector<RunStats>& runs, const std::string& title) {
  // One panel per target and token pattern, in the order the runs came;
  // in each, one latency histogram per client count: log-spaced bins from
  // 10 us to 10 s (5 per decade), y the share of the run's writes per bin.
  std::vector<std::pair<std::string, std::string>> panels;
  for (const RunStats& r : runs) {
    std::pair<std::string, std::string> key{r.target, r.pattern};
    if (std::find(panels.begin(), panels.end(), key) == panels.end()) {
      panels.push_back(key);
    }
  }
  constexpr int kBinsPerDecade = 5, kDecades = 6;
  constexpr int kBins = kBinsPerDecade * kDecades;
  constexpr int kColumns = 3;
  const double pw = 260, ph = 130;          // Plot area of a panel.
  const double cw = pw + 70, ch = ph + 70;  // A panel with its margins.
  const int rows = (static_cast<int>(panels.size()) + kColumns - 1) / kColumns;
  const double w = kColumns * cw + 20, h = 70 + rows * ch;
  const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c",
                          "#d62728", "#9467bd", "#8c564b"};
  std::vector<int> client_counts;
  for (const RunStats& r : runs) {
    if (std::find(client_counts.begin(), client_counts.end(), r.clients) ==
        client_counts.end()) {
      client_counts.push_back(r.clients);
    }
  }
  std::sort(client_counts.begin(), client_counts.end());
  auto color_of = [&](int clients) {
    size_t i = std::find(client_counts.begin(), client_counts.end(), clients) -
               client_counts.begin();
    return colors[i % 6];
  };

  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
      "height=\"%.0f\" font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"20\" y=\"24\" font-size=\"15\">%s</text>\n",
      w, h, title);
  absl::StrAppend(
      &svg,
      absl::StrFormat("<text x=\"%.0f\" y=\"42\" fill=\"#555\">"
                      "y: share of a run's writes per bin (%d "
                      "bins per decade of latency)</text>\n",
                      20 + client_counts.size() * 110.0 + 20, kBinsPerDecade));
  for (size_t i = 0; i < client_counts.size(); ++i) {
    absl::StrAppend(
        &svg, absl::StrFormat("<rect x=\"%.0f\" y=\"36\" width=\"14\" "
                              "height=\"4\" fill=\"%s\"/><text x=\"%.0f\" "
                              "y=\"42\">N=%d clients</text>\n",
                              20 + i * 110.0, color_of(client_counts[i]),
                              38 + i * 110.0, client_counts[i]));
  }
  for (size_t p = 0; p < panels.size(); ++p) {
    const double x0 = 20 + (p % kColumns) * cw + 45;
    const size_t row = p / kColumns;  // Panels fill rows of kColumns.
    const double y0 = 70 + static_cast<double>(row) * ch + 20;
    // The histograms first, to scale the panel's y axis to its highest bin.
    // Rounds of one client count are averaged into one outline.
    std::vector<std::pair<int, std::vector<double>>> hists;
    std::vector<int> rounds_of;
    for (const RunStats& r : runs) {
      if (r.target != panels[p].first || r.pattern != panels[p].second ||
          r.latencies_us.empty()) {
        continue;
      }
      auto it = std::find_if(hists.begin(), hists.end(), [&](const auto& h) {
        return h.first == r.clients;
      });
      if (it == hists.end()) {
        hists.emplace_back(r.clients, std::vector<double>(kBins, 0));
        rounds_of.push_back(0);
        it = hists.end() - 1;
      }
      ++rounds_of[it - hists.begin()];
      for (uint32_t us : r.latencies_us) {
        double v = std::log10(std::max(10.0, static_cast<double>(us))) - 1.0;
        int b = std::min(kBins - 1, static_cast<int>(v * kBinsPerDecade));
        it->second[b] += 1.0 / r.latencies_us.size();
      }
    }
    double peak = 0;
    for (size_t i = 0; i < hists.size(); ++i) {
      for (double& b : hists[i].second) {
        b /= rounds_of[i];
        peak = std::max(peak, b);
      }
    }
    if (peak <= 0) peak = 1;
    absl::StrAppend(
        &svg,
        absl::StrFormat(
            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">%s, %s</text>\n"
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
            "fill=\"none\" stroke=\"#bbb\"/>\n"
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.0f%%</text>\n"
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">0</text>\n",
            x0, y0 - 6, panels[p].first, panels[p].second, x0, y0, pw, ph,
            x0 - 4, y0 + 10, peak * 100, x0 - 4, y0 + ph));
    const char* labels[] = {"10us",  "100us", "1ms", "10ms",
                            "100ms", "1s",    "10s"};
    for (int d = 0; d <= kDecades; ++d) {
      const double x = x0 + d * pw / kDecades;
      absl::StrAppend(
          &svg, absl::StrFormat(
                    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                    "stroke=\"#eee\"/><text x=\"%.1f\" y=\"%.1f\" "
                    "text-anchor=\"middle\" font-size=\"10\">%s</text>\n",
                    x, y0, x, y0 + ph, x, y0 + ph + 14, labels[d]));
    }
    for (const auto& [clients, bins] : hists) {
      // A step outline, so that the client counts can overlap.
      std::string points = absl::StrFormat("%.1f,%.1f", x0, y0 + ph);
      for (int b = 0; b < kBins; ++b) {
        const double y = y0 + ph - ph * bins[b] / peak;
        const double xa = x0 + b * pw / kBins, xb = x0 + (b + 1) * pw / kBins;
        absl::StrAppend(&points,
                        absl::StrFormat(" %.1f,%.1f %.1f,%.1f", xa, y, xb, y));
      }
      absl::StrAppend(&points, absl::StrFormat(" %.1f,%.1f", x0 + pw, y0 + ph));
      absl::StrAppend(&svg,
                      absl::StrFormat("<polyline fill=\"none\" stroke=\"%s\" "
                                      "stroke-width=\"1.6\" points=\"%s\"/>\n",
                                      color_of(clients), points));
    }
  }
  return svg + "</svg>\n";
}

}  // namespace fencegate::bench
