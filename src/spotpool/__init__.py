"""Spotpool: spot CVM pools on Tencent Cloud, one Pulumi stack per pool."""
