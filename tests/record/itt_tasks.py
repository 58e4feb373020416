"""Emits ITT tasks through the `ittapi` package in two domains and writes how many of
each it emitted (its own account) as JSON to argv[1]."""

import json
import sys

import ittapi

counts = {}
for domain_name, names in (("opscope.test", ["load", "compute"]), ("other", ["save"])):
    domain = ittapi.domain(domain_name)
    for i in range(7):
        for name in names:
            with ittapi.task(name, domain=domain):
                pass
            key = f"itt/{domain_name}|{name}"
            counts[key] = counts.get(key, 0) + 1

with open(sys.argv[1], "w") as out:
    json.dump(counts, out)
