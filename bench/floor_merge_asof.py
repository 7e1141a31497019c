"""The floor of `failcast rates` on an availability trace: the pandas script a user writes (issue 27).

    python bench/floor_merge_asof.py incidents.csv inventory.csv   # CSV: cluster_id,failures,node_hours,rate

Every failure is matched to its node's last interval start (merge_asof) and kept when it is
inside (closed interval); node-hours per cluster are the intervals clipped to the window end (the
latest time in either file). No interruption window, categories or uptime: on
bench/availability.py's fleets (every incident interrupting, none within 30 minutes of another
on its node, downtime only between intervals) it is the same count and exposure as failcast's.
"""

import sys

import pandas as pd


def rates(incidents: str, inventory: str) -> pd.DataFrame:
    inc = pd.read_csv(incidents, usecols=["timestamp", "cluster_id", "node_id"], parse_dates=["timestamp"])
    inv = pd.read_csv(
        inventory,
        usecols=["cluster_id", "node_id", "in_service_from", "in_service_to"],
        parse_dates=["in_service_from", "in_service_to"],
    )
    end = max(inc["timestamp"].max(), inv["in_service_from"].max(), inv["in_service_to"].max())
    inv["in_service_to"] = inv["in_service_to"].fillna(end).clip(upper=end)
    inv = inv[inv["in_service_to"] > inv["in_service_from"]]
    seconds = (inv["in_service_to"] - inv["in_service_from"]).dt.total_seconds()
    hours = seconds.groupby(inv["cluster_id"]).sum() / 3600
    matched = pd.merge_asof(
        inc.sort_values("timestamp"),
        inv.sort_values("in_service_from"),
        left_on="timestamp",
        right_on="in_service_from",
        by=["cluster_id", "node_id"],
    )
    inside = matched[matched["timestamp"] <= matched["in_service_to"]]
    failures = inside.groupby("cluster_id").size().reindex(hours.index, fill_value=0)
    return pd.DataFrame({"failures": failures, "node_hours": hours, "rate": failures / hours})


if __name__ == "__main__":
    print(rates(sys.argv[1], sys.argv[2]).to_csv(), end="")
