"""The sandbox's seeded data: deterministic, built fresh at start and on every reset.

Three environments; 48 dashboards with Russian and English titles (42 is "Отчёт по
энергопотреблению"), each deployed to some environments with its own version and health;
databases with tables and columns; datasets; maintenance windows; past migrations and the
finished tasks that ran them. Times are relative to `now` so the data always looks current.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

ENVIRONMENTS: list[dict[str, str]] = [
    {"id": "ss-dev", "name": "Development", "url": "https://superset.ss-dev.example"},
    {"id": "ss-stage", "name": "Staging", "url": "https://superset.ss-stage.example"},
    {"id": "prod", "name": "Production", "url": "https://superset.example"},
]
ENV_IDS = [e["id"] for e in ENVIRONMENTS]

# (Russian title, English title); the dashboard id is the position + 1.
TITLES: list[tuple[str, str]] = [
    ("Продажи по регионам", "Sales by region"),
    ("Выручка за квартал", "Quarterly revenue"),
    ("Отток клиентов", "Customer churn"),
    ("Воронка продаж", "Sales funnel"),
    ("Складские остатки", "Warehouse stock"),
    ("Логистика и доставка", "Logistics and delivery"),
    ("Качество данных", "Data quality"),
    ("Активность пользователей", "User activity"),
    ("Маркетинговые кампании", "Marketing campaigns"),
    ("Финансовый отчёт", "Financial report"),
    ("Бюджет отдела", "Department budget"),
    ("Персонал и найм", "Staff and hiring"),
    ("Обращения в поддержку", "Support tickets"),
    ("Время ответа сервиса", "Service response time"),
    ("Загрузка серверов", "Server load"),
    ("Ошибки приложений", "Application errors"),
    ("Платежи и транзакции", "Payments and transactions"),
    ("Мошеннические операции", "Fraudulent operations"),
    ("Кредитный портфель", "Loan portfolio"),
    ("Производственный план", "Production plan"),
    ("Простои оборудования", "Equipment downtime"),
    ("Расход топлива", "Fuel consumption"),
    ("Выбросы CO2", "CO2 emissions"),
    ("Погода и климат", "Weather and climate"),
    ("Трафик сайта", "Website traffic"),
    ("Мобильное приложение", "Mobile app"),
    ("Конверсия заказов", "Order conversion"),
    ("Средний чек", "Average receipt"),
    ("Ассортимент товаров", "Product assortment"),
    ("Цены конкурентов", "Competitor prices"),
    ("Закупки у поставщиков", "Supplier purchases"),
    ("Дебиторская задолженность", "Accounts receivable"),
    ("Налоговая отчётность", "Tax reporting"),
    ("Отчёт по продажам", "Sales report"),
    ("Удовлетворённость клиентов", "Customer satisfaction"),
    ("Качество связи", "Network quality"),
    ("Абоненты по тарифам", "Subscribers by plan"),
    ("Аварии в сети", "Network outages"),
    ("Водоснабжение", "Water supply"),
    ("Теплоснабжение", "Heat supply"),
    ("Потребление газа", "Gas consumption"),
    ("Отчёт по энергопотреблению", "Energy consumption report"),
    ("Пиковые нагрузки энергосети", "Power grid peak load"),
    ("Счётчики электроэнергии", "Electricity meters"),
    ("Тарифы на электроэнергию", "Electricity tariffs"),
    ("Обучение сотрудников", "Employee training"),
    ("Безопасность труда", "Workplace safety"),
    ("Исполнение SLA", "SLA compliance"),
]
OWNERS = ["alice", "bob", "carol", "dmitry", "elena"]

# (id, name, backend, {table: (columns, rows in ss-dev)}); other environments hold more rows.
DATABASES: list[tuple[int, str, str, dict[str, tuple[list[str], int]]]] = [
    (1, "analytics", "postgresql", {
        "sales": (["id", "region", "amount", "sold_at"], 120_000),
        "customers": (["id", "name", "segment", "created_at"], 8_400),
        "churn_events": (["customer_id", "reason", "churned_at"], 950),
    }),
    (2, "warehouse", "clickhouse", {
        "stock": (["sku", "warehouse", "quantity", "updated_at"], 56_000),
        "shipments": (["id", "sku", "destination", "shipped_at", "delivered_at"], 310_000),
    }),
    (3, "billing", "postgresql", {
        "payments": (["id", "account", "amount", "currency", "paid_at"], 2_100_000),
        "invoices": (["id", "account", "due_at", "status"], 74_000),
    }),
    (4, "telemetry", "clickhouse", {
        "energy_readings": (["meter_id", "kwh", "read_at", "region"], 9_800_000),
        "grid_load": (["substation", "mw", "measured_at"], 1_250_000),
        "app_errors": (["service", "code", "message", "at"], 430_000),
    }),
]
ROW_FACTOR = {"ss-dev": 1, "ss-stage": 3, "prod": 12}

# (id, name, database id, table, Russian description, English description)
DATASETS: list[tuple[int, str, int, str, str, str]] = [
    (1, "sales_daily", 1, "sales", "Продажи по дням", "Daily sales"),
    (2, "customers", 1, "customers", "Клиенты и сегменты", "Customers and segments"),
    (3, "churn", 1, "churn_events", "События оттока", "Churn events"),
    (4, "stock_levels", 2, "stock", "Остатки на складах", "Stock levels"),
    (5, "shipments", 2, "shipments", "Отгрузки и доставка", "Shipments and deliveries"),
    (6, "payments", 3, "payments", "Платежи", "Payments"),
    (7, "invoices", 3, "invoices", "Счета", "Invoices"),
    (8, "energy_consumption", 4, "energy_readings", "Потребление электроэнергии",
     "Electricity consumption"),
    (9, "grid_peak_load", 4, "grid_load", "Пиковые нагрузки сети", "Grid peak load"),
    (10, "app_errors", 4, "app_errors", "Ошибки приложений", "Application errors"),
]
# Datasets behind each dashboard (by dashboard id; the rest use dataset 1).
DASHBOARD_DATASETS: dict[int, list[int]] = {
    3: [2, 3], 5: [4], 6: [5], 16: [10], 17: [6], 32: [7], 42: [8, 9], 43: [9], 44: [8],
}


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="seconds").replace("+00:00", "Z")


def _present(dashboard_id: int, env: str) -> bool:
    """ss-dev has every dashboard; stage and prod lag behind (42 is everywhere)."""
    if env == "ss-stage":
        return dashboard_id % 5 != 4
    if env == "prod":
        return dashboard_id % 4 != 3
    return True


def _health(dashboard_id: int, env_index: int) -> dict[str, Any]:
    roll = (dashboard_id * 7 + env_index * 3) % 10
    status = "failing" if roll == 0 else "degraded" if roll in (1, 2) else "healthy"
    return {
        "status": status,
        "errors_24h": {"healthy": 0, "degraded": 3 + roll, "failing": 40 + dashboard_id}[status],
        "p95_latency_ms": 300 + (dashboard_id * 37 + env_index * 91) % 2200,
        "data_freshness_min": 5 + (dashboard_id * 13 + env_index * 29) % 180,
    }


def seed_dashboards() -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for i, (ru, en) in enumerate(TITLES, start=1):
        minor = i % 9
        envs: dict[str, dict[str, Any]] = {}
        for idx, env in enumerate(ENV_IDS):
            if not _present(i, env):
                continue
            # ss-dev runs ahead; prod sometimes lags a patch behind stage.
            patch = {"ss-dev": 3, "ss-stage": 2, "prod": 2 if i % 2 else 1}[env]
            envs[env] = {"version": f"1.{minor}.{patch}", "health": _health(i, idx)}
        out[i] = {
            "id": i, "title": ru, "title_en": en, "owner": OWNERS[i % len(OWNERS)],
            "datasets": DASHBOARD_DATASETS.get(i, [1]), "charts": 3 + i % 6, "envs": envs,
        }
    return out


def seed_databases() -> dict[int, dict[str, Any]]:
    return {
        db_id: {
            "id": db_id, "name": name, "backend": backend,
            "tables": {t: {"columns": cols, "rows": rows} for t, (cols, rows) in tables.items()},
        }
        for db_id, name, backend, tables in DATABASES
    }


def seed_datasets() -> dict[int, dict[str, Any]]:
    return {
        ds_id: {"id": ds_id, "name": name, "database_id": db, "table": table,
                "description": ru, "description_en": en, "refreshed_at": {}}
        for ds_id, name, db, table, ru, en in DATASETS
    }


def seed_maintenance(now: datetime) -> dict[int, dict[str, Any]]:
    rows = [
        (1, "prod", "ended", "Обновление Superset до 4.1", -7 * 24 * 60, 120),
        (2, "ss-stage", "active", "Перестроение индексов", -30, 90),
        (3, "prod", "scheduled", "Плановая замена сертификатов", 24 * 60, 60),
    ]
    return {
        ev_id: {"id": ev_id, "env_id": env, "status": status, "reason": reason,
                "starts_at": _iso(now + timedelta(minutes=start)),
                "ends_at": _iso(now + timedelta(minutes=start + length))}
        for ev_id, env, status, reason, start, length in rows
    }


def seed_migrations(now: datetime) -> tuple[dict[int, dict[str, Any]], list[dict[str, Any]]]:
    """Past migrations and the finished tasks that carried them out."""
    rows = [
        (1, 42, "ss-dev", "ss-stage", "succeeded", -3 * 24 * 60),
        (2, 7, "ss-stage", "prod", "failed", -2 * 24 * 60),
        (3, 1, "ss-dev", "ss-stage", "succeeded", -26 * 60),
    ]
    migrations, tasks = {}, []
    for mig_id, dash, src, dst, status, at in rows:
        task_id = f"task-seed-{mig_id}"
        ts = _iso(now + timedelta(minutes=at))
        migrations[mig_id] = {"id": mig_id, "dashboard_id": dash, "source_env": src,
                              "target_env": dst, "status": status, "task_id": task_id,
                              "created_at": ts}
        tasks.append({"task_id": task_id, "kind": "migration", "env_id": dst, "status": status,
                      "created_at": ts, "migration_id": mig_id,
                      "error": "dataset schema mismatch" if status == "failed" else None})
    return migrations, tasks


def now_utc() -> datetime:
    return datetime.now(UTC)


def iso(t: datetime) -> str:
    return _iso(t)
