// Copyright fencegate authors.
//
// `fencegate-bench classifier`: what the PostgreSQL route's SQL classifier
// (postgres/sql_classifier.h) costs a Write, on a cache
// hit and on a miss (a parse by libpg_query), for a few statements of the
// sizes workers send. Runs in this process; no server.

#ifndef BENCH_CLASSIFIER_H_
#define BENCH_CLASSIFIER_H_

namespace fencegate::bench {

// Prints one row per statement: ns per classification on a miss and on a
// hit, the median of `rounds` rounds of about 0.2 s each, with the lowest
// and highest. Returns the process's exit code.
int RunClassifier(int rounds);

}  // namespace fencegate::bench

#endif  // BENCH_CLASSIFIER_H_
