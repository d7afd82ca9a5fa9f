// Copyright fencegate authors.
//
// Scraping /metrics over real HTTP (Boost.Beast) and reading one sample out
// of the Prometheus text format, for the observability tests.

#ifndef TESTS_METRICS_SCRAPE_H_
#define TESTS_METRICS_SCRAPE_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace fencegate::testing {

// GET http://127.0.0.1:`port``target`; the body of a 200 answer.
absl::StatusOr<std::string> HttpGet(int port, const std::string& target);

// The value of the sample of `name` whose labels include `labels`, summed
// over every such sample; -1 if there is none.
double SampleValue(const std::string& exposition, const std::string& name,
                   const std::map<std::string, std::string>& labels = {});

}  // namespace fencegate::testing

#endif  // TESTS_METRICS_SCRAPE_H_
