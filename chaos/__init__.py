"""The chaos suite: runs under fault points, SIGKILLs and outages, audited against history."""
