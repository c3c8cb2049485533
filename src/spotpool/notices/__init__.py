"""The spot termination-notice agent that runs on each instance (`spotpool notice-agent`)."""
