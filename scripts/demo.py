# A real example for PyBox's data image: read the CSV the host sent in,
# summarise it with pandas, and draw a chart that comes back as a file.
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

df = pd.read_csv("/tmp/input/sales.csv")
totals = df.groupby("region")["sales"].sum().sort_values(ascending=False)
print(totals.to_string())
ax = totals.plot.bar(title="Sales by region")
ax.set_ylabel("sales")
plt.tight_layout()
plt.savefig("/tmp/output/chart.png", dpi=80)
print("wrote /tmp/output/chart.png")
