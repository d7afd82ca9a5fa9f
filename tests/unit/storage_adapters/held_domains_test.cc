// Copyright fencegate authors.

#include "storage_adapters/postgres/held_domains.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace fencegate::postgres {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

TEST(HeldDomainsTest, HoldsAtOneTokenAndOwesTheLeastRecentlyUsedPastTheBound) {
  HeldDomains held(2);
  EXPECT_FALSE(held.Use("a", 1));
  held.Held("a", 1);
  held.Held("b", 1);
  EXPECT_TRUE(held.Use("a", 1));   // a is the most recently used now
  EXPECT_FALSE(held.Use("a", 2));  // another token: fence_hold() again
  held.Held("c", 1);               // b goes
  EXPECT_THAT(held.TakeReleases(), ElementsAre("b"));
  EXPECT_THAT(held.TakeReleases(), IsEmpty());
  EXPECT_TRUE(held.Use("a", 1));
  EXPECT_TRUE(held.Use("c", 1));
  EXPECT_FALSE(held.Use("b", 1));
  EXPECT_EQ(held.held(), 2u);
}

TEST(HeldDomainsTest, AReleaseIsOwedUntilTakenOrHeldAgain) {
  HeldDomains held(4);
  held.Held("a", 1);
  held.Release("a");
  held.Release("b");  // never held: its lock may still be
  EXPECT_FALSE(held.Use("a", 1));
  EXPECT_TRUE(held.Holds("a"));
  EXPECT_TRUE(held.Holds("b"));
  EXPECT_THAT(held.Domains(), UnorderedElementsAre("a", "b"));
  held.Held("b", 3);  // held again: the owed release would give it up
  EXPECT_THAT(held.TakeReleases(), ElementsAre("a"));
  EXPECT_FALSE(held.Holds("a"));
  held.Clear();
  EXPECT_THAT(held.Domains(), IsEmpty());
}

TEST(HeldDomainsTest, ABoundOfZeroKeepsNothing) {
  HeldDomains held(0);
  held.Held("a", 1);
  EXPECT_FALSE(held.Use("a", 1));
  EXPECT_THAT(held.TakeReleases(), ElementsAre("a"));
}

TEST(HeldDomainsTest, TheRoutesTallyCountsEveryConnectionUntilItsReleaseGoes) {
  HoldTally tally;
  {
    HeldDomains first(1, &tally);
    HeldDomains second(1, &tally);
    first.Held("a", 5);
    second.Held("a", 5);
    EXPECT_FALSE(tally.HeldBelow("a", 5));
    EXPECT_TRUE(tally.HeldBelow("a", 6));  // a raise: give it up first
    EXPECT_FALSE(tally.HeldAtAll("b"));
    first.Held("b", 1);  // a is owed a release: still held until it goes
    EXPECT_TRUE(tally.HeldAtAll("a"));
    EXPECT_THAT(first.TakeReleases(), ElementsAre("a"));
    EXPECT_TRUE(tally.HeldAtAll("a"));  // second still holds it
    second.Release("a");
    EXPECT_TRUE(tally.HeldAtAll("a"));
    (void)second.TakeReleases();
    EXPECT_FALSE(tally.HeldAtAll("a"));
    // A release owed for a domain never held (a failed fence_hold()): held
    // at an unknown token until it goes.
    second.Release("c");
    EXPECT_TRUE(tally.HeldBelow("c", 1));
    EXPECT_TRUE(tally.HeldAtAll("b"));
  }
  // Connections that end give up everything.
  EXPECT_FALSE(tally.HeldAtAll("b"));
  EXPECT_FALSE(tally.HeldAtAll("c"));
}

}  // namespace
}  // namespace fencegate::postgres
