from django.urls import path

from approvals.web import views

app_name = "approvals"

urlpatterns = [
    path("inbox/", views.inbox, name="inbox"),
    path("inbox/history/", views.history, name="history"),
    path("inbox/pauses/<str:pause_id>/decide/", views.decide, name="decide"),
]
