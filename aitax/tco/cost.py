"""Coolan-style TCO: amortised equipment plus power, and the assumptions that reproduce the paper's figures.

The model (every input is a named parameter in the catalog's `cost:` section, with its source):

    equipment      = sum of line items: node groups x per-node items, plus network lines  (the tables)
    server capex   = node equipment + racks x rack_usd, racks = ceil(nodes / servers_per_rack)
    network capex  = network equipment x (1 + network_overhead_fraction)
    yearly capex   = capex / amortisation_years                                              (straight line)
    IT power       = node rated W x server_utilisation + switch rated W x switch_utilisation
    yearly power   = IT kW x (1 + cooling_overhead) x hours_per_year x electricity_usd_per_kwh
    yearly TCO     = yearly server capex + yearly network capex + yearly power

How the paper's figures come out (Sec. 7.2-7.3, paper catalog):

* Equipment is exact from the line items: $33,577,760 homogeneous, $27,878,431 purpose-built.
* Servers $10.2M/yr: the server lines (server, NVMe and NIC, as Table 3 lists them) over 3 years are $10.17M;
  52 racks at $2,500 make $10.21M.
* Network $1.3M/yr: switches and cables over 3 years are only $1.02M; the paper's Coolan run added rack,
  cabling and installation lines it does not list. A 26% network overhead gives $1.29M (anything from 23% to
  32% rounds to 1.3).
* Power $1.4M/yr: servers at their 750 W rating (the paper's "maximum load"), switches at half their 398 W
  maximum, cooling doubling it, $0.10/kWh, 8,760 h: 799.8 kW -> $1.40M. All equipment at its rating would be
  831.7 kW -> $1.46M.
* Total $12.90M vs $10.76M: 16.6% lower, the paper's saving; purpose-built power is $1.36M (the paper: 1.4).

Two paper figures are not followed, because they contradict its own line items:

* The Table 3 caption's "around US$30.9 million": no subset of Table 3 sums to it (servers with NVMe and
  NIC are $30.50M, plus cables $30.81M) and the yearly $10.2M + $1.3M needs more than $33.5M of capex. The
  table's printed total $33,577,760 is followed.
* The power paragraph's 921 kW ($1.61M/yr at full load): 1,024 x 750 W + 160 x 398 W is 831.7 kW; 921 kW
  would need 384 switches or 900 W servers. Its TCO uses $1.4M, which is followed.

The network overhead, rack line and switch utilisation are calibrated (the paper gives no values); everything
else is the paper's.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from aitax.tco.catalog import Catalog, Design, Item, build_parameters

SERVERS = "servers"
NETWORK = "network"


@dataclass(frozen=True)
class CostParameters:
    amortisation_years: int
    electricity_usd_per_kwh: float
    hours_per_year: int
    cooling_overhead: float
    server_utilisation: float
    switch_utilisation: float
    servers_per_rack: int
    rack_usd: float
    network_overhead_fraction: float


@dataclass(frozen=True)
class LineItem:
    item: Item
    group: str
    category: str
    per_node: int | None
    quantity: int

    @property
    def total_usd(self) -> float:
        return self.item.price_usd * self.quantity


@dataclass(frozen=True)
class CostBreakdown:
    design: str
    parameters: CostParameters
    lines: tuple[LineItem, ...]
    nodes: int
    racks: int
    it_watts: float
    full_load_it_watts: float

    def equipment_usd(self, category: str | None = None) -> float:
        return sum(line.total_usd for line in self.lines if category in (None, line.category))

    @property
    def rack_usd(self) -> float:
        return self.racks * self.parameters.rack_usd

    @property
    def network_overhead_usd(self) -> float:
        return self.equipment_usd(NETWORK) * self.parameters.network_overhead_fraction

    @property
    def yearly_servers_usd(self) -> float:
        return (self.equipment_usd(SERVERS) + self.rack_usd) / self.parameters.amortisation_years

    @property
    def yearly_network_usd(self) -> float:
        return (self.equipment_usd(NETWORK) + self.network_overhead_usd) / self.parameters.amortisation_years

    @property
    def yearly_power_usd(self) -> float:
        return yearly_power_usd(self.it_watts, self.parameters)

    @property
    def yearly_total_usd(self) -> float:
        return self.yearly_servers_usd + self.yearly_network_usd + self.yearly_power_usd


@dataclass(frozen=True)
class Check:
    """One of our figures beside the paper's, compared at the paper's precision."""

    label: str
    ours: str
    paper: str
    matches: bool


def cost_parameters(catalog: Catalog) -> CostParameters:
    return build_parameters(CostParameters, catalog.cost, f"{catalog.path.name}: cost")


def yearly_power_usd(it_watts: float, parameters: CostParameters) -> float:
    facility_kw = it_watts / 1000 * (1 + parameters.cooling_overhead)
    return facility_kw * parameters.hours_per_year * parameters.electricity_usd_per_kwh


def line_items(design: Design, catalog: Catalog) -> list[LineItem]:
    lines = [
        LineItem(catalog.items[item_id], group.role, SERVERS, per_node, per_node * group.count)
        for group in design.nodes
        for item_id, per_node in group.items.items()
    ]
    lines += [
        LineItem(catalog.items[line.item], line.role, NETWORK, None, line.count) for line in design.network
    ]
    return lines


def cost_design(design: Design, catalog: Catalog) -> CostBreakdown:
    parameters = cost_parameters(catalog)
    lines = line_items(design, catalog)
    nodes = sum(group.count for group in design.nodes)
    utilisation = {SERVERS: parameters.server_utilisation, NETWORK: parameters.switch_utilisation}
    return CostBreakdown(
        design=design.name,
        parameters=parameters,
        lines=tuple(lines),
        nodes=nodes,
        racks=ceil(nodes / parameters.servers_per_rack),
        it_watts=sum(line.item.rated_watts * line.quantity * utilisation[line.category] for line in lines),
        full_load_it_watts=sum(line.item.rated_watts * line.quantity for line in lines),
    )


def saving_percent(baseline: CostBreakdown, other: CostBreakdown) -> float:
    return (1 - other.yearly_total_usd / baseline.yearly_total_usd) * 100


def reported_checks(design: Design, breakdown: CostBreakdown) -> list[Check]:
    """Our figures for `design` against the ones the paper reports for it (the catalog's `reported`)."""
    ours_by_field = {
        "equipment_usd": breakdown.equipment_usd(),
        "yearly_servers_musd": breakdown.yearly_servers_usd / 1e6,
        "yearly_network_musd": breakdown.yearly_network_usd / 1e6,
        "yearly_power_musd": breakdown.yearly_power_usd / 1e6,
        "yearly_total_musd": breakdown.yearly_total_usd / 1e6,
    }
    checks = []
    for field, paper in design.reported.items():
        ours = ours_by_field[field]
        if field == "equipment_usd":
            checks.append(
                Check(f"{design.name} equipment", f"${ours:,.0f}", f"${paper:,.0f}", round(ours) == paper)
            )
        else:
            label = f"{design.name} {field.removeprefix('yearly_').removesuffix('_musd')}/yr"
            checks.append(Check(label, f"${ours:.2f}M", f"${paper}M", round(ours, 1) == paper))
    return checks


def saving_check(saving: float, paper_percent: float) -> Check:
    return Check("saving", f"{saving:.2f}%", f"{paper_percent}%", round(saving, 1) == paper_percent)
