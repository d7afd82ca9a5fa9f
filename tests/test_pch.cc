// Copyright fencegate authors.
//
// The target that builds the suites' shared precompiled header
// (tests/CMakeLists.txt, fencegate_test_pch); it compiles nothing else.
