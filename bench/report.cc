// Copyright fencegate authors.

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench.h"

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

}  // namespace

void RunStats::Finish() { std::sort(latencies_us.begin(), latencies_us.end()); }

double RunStats::Percentile(double p) const {
  if (latencies_us.empty()) return 0;
  size_t i = static_cast<size_t>(std::ceil(p / 100.0 * latencies_us.size()));
  return latencies_us[std::min(latencies_us.size() - 1, i == 0 ? 0 : i - 1)];
}

std::string ToJson(const std::vector<RunStats>& runs,
                   const std::string& extra_json_fields) {
  std::string out = "{\n  \"runs\": [\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunStats& r = runs[i];
    absl::StrAppend(
        &out, "    {\"target\": ", JsonString(r.target),
        ", \"pattern\": ", JsonString(r.pattern), ", \"clients\": ", r.clients,
        absl::StrFormat(", \"seconds\": %.3f, \"ops\": %d, \"errors\": %d, "
                        "\"ops_per_s\": %.1f, \"p50_us\": %.0f, "
                        "\"p99_us\": %.0f, \"p999_us\": %.0f",
                        r.seconds, r.ops, r.errors, r.ops_per_s(),
                        r.Percentile(50), r.Percentile(99), r.Percentile(99.9)),
        ", \"first_error\": ", JsonString(r.first_error), "}",
        i + 1 < runs.size() ? "," : "", "\n");
  }
  absl::StrAppend(&out, "  ]", extra_json_fields.empty() ? "" : ",\n",
                  extra_json_fields, "\n}\n");
  return out;
}

std::string ToSvg(const std::vector<RunStats>& runs, const std::string& title) {
  // Cumulative distribution of latency per run, x on a log scale from
  // 10 us to 1 s.
  const double w = 900, h = 520, left = 70, right = 260, top = 40, bottom = 50;
  const double pw = w - left - right, ph = h - top - bottom;
  auto x_of = [&](double us) {
    double v = std::log10(std::max(10.0, std::min(1e6, us)));
    return left + (v - 1.0) / 5.0 * pw;
  };
  const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                          "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                          "#bcbd22", "#17becf"};
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
      "height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.0f\" y=\"24\" font-size=\"15\">%s</text>\n",
      w, h, left, title);
  for (int d = 1; d <= 6; ++d) {
    double x = x_of(std::pow(10, d));
    const char* label[] = {"", "10us", "100us", "1ms", "10ms", "100ms", "1s"};
    absl::StrAppend(
        &svg,
        absl::StrFormat("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                        "stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" "
                        "text-anchor=\"middle\">%s</text>\n",
                        x, top, x, top + ph, x, top + ph + 18, label[d]));
  }
  for (int q = 0; q <= 4; ++q) {
    double y = top + ph - q * ph / 4;
    absl::StrAppend(
        &svg,
        absl::StrFormat("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                        "stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" "
                        "text-anchor=\"end\">%d%%</text>\n",
                        left, y, left + pw, y, left - 6, y + 4, q * 25));
  }
  absl::StrAppend(
      &svg, absl::StrFormat(
                "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">latency "
                "(log scale); y: share of writes at or below</text>\n",
                left + pw / 2, h - 10));
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunStats& r = runs[i];
    if (r.latencies_us.empty()) continue;
    std::string points;
    const size_t n = r.latencies_us.size();
    const size_t step = std::max<size_t>(1, n / 400);
    for (size_t k = 0; k < n; k += step) {
      absl::StrAppend(
          &points,
          absl::StrFormat("%.1f,%.1f ", x_of(r.latencies_us[k]),
                          top + ph - ph * static_cast<double>(k + 1) / n));
    }
    absl::StrAppend(&points, absl::StrFormat("%.1f,%.1f",
                                             x_of(r.latencies_us[n - 1]), top));
    const char* color = colors[i % 10];
    absl::StrAppend(
        &svg,
        absl::StrFormat(
            "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\" "
            "points=\"%s\"/>\n<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" "
            "height=\"4\" fill=\"%s\"/><text x=\"%.0f\" y=\"%.0f\">%s %s "
            "N=%d</text>\n",
            color, points, w - right + 15, top + 12 + i * 18 - 4, color,
            w - right + 32, top + 12 + i * 18, r.target, r.pattern, r.clients));
  }
  return svg + "</svg>\n";
}

}  // namespace fencegate::bench
